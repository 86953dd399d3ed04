/**
 * Reaction emoji (reference §2.7, `wandb.reaction.1`): one emoji per reaction, stored with its alias,
 * its detoned form (no skin-tone modifier) and the detoned alias. Aliases follow the CLDR short names
 * the Python server's `emoji.demojize` gives (`👍` → `:thumbs_up:`); an emoji outside this table keeps
 * itself as its alias, as demojize does for emoji it does not know.
 */

const ALIASES: Record<string, string> = {
  '👍': 'thumbs_up', '👎': 'thumbs_down', '❤️': 'red_heart', '❤': 'red_heart', '😂': 'face_with_tears_of_joy',
  '🎉': 'party_popper', '🔥': 'fire', '👀': 'eyes', '🚀': 'rocket', '✅': 'check_mark_button', '❌': 'cross_mark',
  '✔️': 'check_mark', '✔': 'check_mark', '⚠️': 'warning', '⚠': 'warning', '😀': 'grinning_face',
  '😃': 'grinning_face_with_big_eyes', '😄': 'grinning_face_with_smiling_eyes', '😁': 'beaming_face_with_smiling_eyes',
  '😆': 'grinning_squinting_face', '😅': 'grinning_face_with_sweat', '🤣': 'rolling_on_the_floor_laughing',
  '🙂': 'slightly_smiling_face', '😉': 'winking_face', '😊': 'smiling_face_with_smiling_eyes',
  '😍': 'smiling_face_with_heart-eyes', '🤔': 'thinking_face', '😐': 'neutral_face', '😕': 'confused_face',
  '😢': 'crying_face', '😭': 'loudly_crying_face', '😡': 'enraged_face', '😮': 'face_with_open_mouth',
  '😱': 'face_screaming_in_fear', '🤯': 'exploding_head', '🥳': 'partying_face', '😎': 'smiling_face_with_sunglasses',
  '🙏': 'folded_hands', '👏': 'clapping_hands', '🙌': 'raising_hands', '👋': 'waving_hand', '👌': 'OK_hand',
  '💪': 'flexed_biceps', '🤷': 'person_shrugging', '🤦': 'person_facepalming', '💯': 'hundred_points', '⭐': 'star',
  '✨': 'sparkles', '💡': 'light_bulb', '🐛': 'bug', '💩': 'pile_of_poo', '🙈': 'see-no-evil_monkey',
};

const SKIN_TONES: Record<string, string> = {
  '\u{1F3FB}': 'light_skin_tone',
  '\u{1F3FC}': 'medium-light_skin_tone',
  '\u{1F3FD}': 'medium_skin_tone',
  '\u{1F3FE}': 'medium-dark_skin_tone',
  '\u{1F3FF}': 'dark_skin_tone',
};
const SKIN_TONE = /[\u{1F3FB}-\u{1F3FF}]/gu;
const EMOJI = /^(?:\p{Extended_Pictographic}|\p{Regional_Indicator}{2}|[0-9#*]\uFE0F?\u20E3)/u;

const segmenter = new Intl.Segmenter('en', { granularity: 'grapheme' });

/** Whether the text is exactly one emoji (one grapheme cluster that is an emoji). */
export function isSingleEmoji(text: string): boolean {
  const graphemes = [...segmenter.segment(text)];
  return graphemes.length === 1 && EMOJI.test(graphemes[0].segment);
}

export function detone(emoji: string): string {
  return emoji.replace(SKIN_TONE, '');
}

export function emojiAlias(emoji: string): string {
  const base = detone(emoji);
  const name = ALIASES[base] ?? ALIASES[base.replace(/\uFE0F/g, '')];
  if (!name) return emoji;
  const tones = [...emoji.matchAll(SKIN_TONE)].map((m) => SKIN_TONES[m[0]]);
  return `:${[name, ...tones].join('_')}:`;
}
