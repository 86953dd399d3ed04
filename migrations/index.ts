import type { Migration } from 'kysely';
import * as foundation from './0001_foundation.js';
import * as training from './0002_training.js';
import * as tracing from './0003_tracing.js';
import * as inference from './0004_inference.js';
import * as tracingExtras from './0005_tracing_extras.js';
import * as otelDumpJson from './0006_otel_dump_json.js';
import * as uiSessions from './0007_ui_sessions.js';
import * as objectTagsAliases from './0008_object_tags_aliases.js';
import * as checkpointLifecycle from './0009_checkpoint_lifecycle.js';
import * as workerResidentTrainers from './0010_worker_resident_trainers.js';
import * as wandb from './0013_wandb.js';
import * as checkpointArtifacts from './0014_checkpoint_artifacts.js';
import * as checkpointUriIndex from './0015_checkpoint_uri_index.js';
import * as deletedCheckpoints from './0016_deleted_checkpoints.js';
import * as workerKeys from './0017_worker_keys.js';
import * as claimIds from './0018_claim_ids.js';
import * as legacyLoraArtifacts from './0019_legacy_lora_artifacts.js';
import * as callLongIntegers from './0020_call_long_integers.js';
import * as callExactNumbers from './0021_call_exact_numbers.js';
import * as feedbackExactNumbers from './0022_feedback_exact_numbers.js';
import * as databaseId from './0023_database_id.js';
import * as runFileUrlExpiry from './0024_run_file_url_expiry.js';
import * as wandbRunTags from './0025_wandb_run_tags.js';
import * as checkpointReleaseSteps from './0026_checkpoint_release_steps.js';
import * as staleCheckpointReleases from './0027_stale_checkpoint_releases.js';

/**
 * Every migration, in order. Listed here rather than read from the folder so that the same list runs
 * from TypeScript sources (tests, CLI) and from the compiled build (the server).
 */
export const migrations: Record<string, Migration> = {
  '0001_foundation': foundation,
  '0002_training': training,
  '0003_tracing': tracing,
  '0004_inference': inference,
  '0005_tracing_extras': tracingExtras,
  '0006_otel_dump_json': otelDumpJson,
  '0007_ui_sessions': uiSessions,
  '0008_object_tags_aliases': objectTagsAliases,
  '0009_checkpoint_lifecycle': checkpointLifecycle,
  '0010_worker_resident_trainers': workerResidentTrainers,
  '0013_wandb': wandb,
  '0014_checkpoint_artifacts': checkpointArtifacts,
  '0015_checkpoint_uri_index': checkpointUriIndex,
  '0016_deleted_checkpoints': deletedCheckpoints,
  '0017_worker_keys': workerKeys,
  '0018_claim_ids': claimIds,
  '0019_legacy_lora_artifacts': legacyLoraArtifacts,
  '0020_call_long_integers': callLongIntegers,
  '0021_call_exact_numbers': callExactNumbers,
  '0022_feedback_exact_numbers': feedbackExactNumbers,
  '0023_database_id': databaseId,
  '0024_run_file_url_expiry': runFileUrlExpiry,
  '0025_wandb_run_tags': wandbRunTags,
  '0026_checkpoint_release_steps': checkpointReleaseSteps,
  '0027_stale_checkpoint_releases': staleCheckpointReleases,
};
