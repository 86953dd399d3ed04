"""Generation-C trajectories, recorded by ART 0.5.23's `with art.Trajectory()` as `exchanges` instead of
`messages_and_choices`, train like the equivalent legacy trajectory; and a group whose rewards differ but which has no
token to train fails the job (exit 3) naming the trajectory and why, instead of completing unchanged."""
import math
import random

import pytest

from helpers import run_job, write_job
from tiny import token_choice
from trainyard_trainer.batch import tokenize_groups
from trainyard_trainer.config import parse_rl_config
from trainyard_trainer.tokenize import InputError

SYSTEM = {"role": "system", "content": "answer one word"}
USER = {"role": "user", "content": "say one word"}
UNSCORED = {"finish_reason": "stop", "index": 0, "logprobs": None, "message": {"role": "assistant", "content": "yes"}}
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]


def exchange(messages, choice, *, tools=None, prompt_token_ids=None, logprobs=True):
    """One `exchanges.chat_completions` entry as ART's client records it: the raw request and the raw ChatCompletion
    (vLLM puts `prompt_token_ids` on the response, `token_ids` on the choice)."""
    request = {"model": "m", "messages": messages, **({"tools": tools} if tools else {}), **({"logprobs": True} if logprobs else {})}
    response = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
                "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
                **({"prompt_token_ids": prompt_token_ids} if prompt_token_ids is not None else {})}
    return {"request": request, "response": response, "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:00:01Z", "model": "m"}


def tokenized(tokenizer, trajectories, **config):
    """The results of one group, in trajectory order, as (token ids, mask, logprobs with NaN as None, weight)."""
    [group], _ = tokenize_groups(tokenizer, [{"trajectories": trajectories}], parse_rl_config(config), random.Random(0))
    return sorted((r.trajectory, r.token_ids, r.mask, [None if math.isnan(x) else x for x in r.logprobs], r.weight) for r in group)


def test_a_chat_completions_exchange_tokenizes_as_the_equivalent_messages_and_choices_trajectory(tokenizer):
    choices = [token_choice(tokenizer, ["maybe", "<|im_end|>"], [-2.5, -0.3]), token_choice(tokenizer, ["no", "<|im_end|>"], [-1.0, -0.1])]
    exchanges = [{"exchanges": {"chat_completions": [exchange([SYSTEM, USER], c, tools=WEATHER)]}, "reward": r}
                 for c, r in zip(choices, [1.0, 0.0])]
    legacy = [{"messages_and_choices": [SYSTEM, USER, c], "tools": WEATHER, "reward": r} for c, r in zip(choices, [1.0, 0.0])]
    ours = tokenized(tokenizer, exchanges)
    assert ours == tokenized(tokenizer, legacy)
    assert [sum(mask) for _, _, mask, _, _ in ours] == [2, 2]


def test_a_request_that_extends_an_earlier_exchange_continues_its_conversation_as_in_art(tokenizer):
    # ART (trajectories/_history.py): the second request holds the first request, its sampled reply and a new user
    # turn, so both replies train in one sequence, as a multi-turn messages_and_choices would.
    first, second = token_choice(tokenizer, ["maybe", "<|im_end|>"], [-2.5, -0.3]), token_choice(tokenizer, ["yes", "<|im_end|>"], [-0.7, -0.2])
    again = {"role": "user", "content": "say one word please"}
    recorded = [exchange([USER], first), exchange([USER, {"role": "assistant", "content": "maybe <|im_end|>", "refusal": None}, again], second)]
    other = token_choice(tokenizer, ["no", "<|im_end|>"], [-1.0, -0.1])
    exchanges = [{"exchanges": {"chat_completions": recorded}, "reward": 1.0}, {"exchanges": {"chat_completions": [exchange([USER], other)]}, "reward": 0.0}]
    legacy = [{"messages_and_choices": [USER, first, again, second], "reward": 1.0}, {"messages_and_choices": [USER, other], "reward": 0.0}]
    ours = tokenized(tokenizer, exchanges)
    assert ours == tokenized(tokenizer, legacy)
    assert [sum(mask) for _, _, mask, _, _ in ours] == [4, 2]


def test_exchanges_with_vllm_token_ids_use_the_responses_prompt_token_ids_verbatim(tokenizer):
    a = {**token_choice(tokenizer, ["hello"], [-0.5]), "token_ids": [14]}
    b = {**token_choice(tokenizer, ["maybe"], [-0.25]), "token_ids": [19]}
    recorded = [exchange([USER], a, prompt_token_ids=[2, 5]), exchange([USER, {"role": "assistant", "content": "hello"}, USER], b, prompt_token_ids=[2, 5, 14, 3, 2])]
    other = {**token_choice(tokenizer, ["no"], [-1.0]), "token_ids": [18]}
    ours = tokenized(tokenizer, [{"exchanges": {"chat_completions": recorded}, "reward": 1.0},
                                 {"exchanges": {"chat_completions": [exchange([USER], other, prompt_token_ids=[2, 5])]}, "reward": 0.0}])
    assert [(ids, mask) for _, ids, mask, _, _ in ours] == [([2, 5, 14, 3, 2, 19], [0, 0, 1, 0, 0, 1]), ([2, 5, 18], [0, 0, 1])]


def test_exchanges_that_do_not_extend_each_other_train_as_separate_sequences_sharing_the_trajectorys_weight(tokenizer):
    a, b = token_choice(tokenizer, ["maybe"], [-2.5]), token_choice(tokenizer, ["yes", "no"], [-0.7, -0.2])
    recorded = [exchange([USER], a), exchange([{"role": "user", "content": "hi"}], b)]
    other = token_choice(tokenizer, ["no"], [-1.0])
    ours = tokenized(tokenizer, [{"exchanges": {"chat_completions": recorded}, "reward": 1.0},
                                 {"exchanges": {"chat_completions": [exchange([USER], other)]}, "reward": 0.0}])
    assert [(t, sum(mask)) for t, _, mask, _, _ in ours] == [(0, 1), (0, 2), (1, 1)]
    assert ours[0][4] == ours[1][4] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("trajectory", "why"),
    [
        ({"exchanges": {"chat_completions": [exchange([USER], UNSCORED, logprobs=False)]}},
         "trajectories[0]: its assistant Choices have no logprobs: request logprobs=True from the engine"),
        ({"messages_and_choices": [USER, {"role": "assistant", "content": "yes"}]},
         "trajectories[0]: its assistant turns are plain messages, not Choices with logprobs"),
        ({"messages_and_choices": [USER]}, "trajectories[0]: it holds no assistant turn"),
        ({"exchanges": {"responses": [{"request": {}, "response": {}}]}},
         "trajectories[0].exchanges: exchanges of kind responses are not trained"),
    ],
)
def test_a_group_whose_rewards_differ_but_has_nothing_to_train_is_refused_naming_the_trajectory_and_why(tokenizer, trajectory, why):
    group = [{**trajectory, "reward": 1.0}, {**trajectory, "reward": 0.0}]
    with pytest.raises(InputError, match="^inputs line 1." + why.replace("(", r"\(").replace("[", r"\[").replace(".", r"\.")):
        tokenized(tokenizer, group)


def test_a_group_whose_rewards_are_equal_still_trains_nothing_whatever_it_holds(tokenizer):
    plain = {"messages_and_choices": [USER, {"role": "assistant", "content": "yes"}], "reward": 1.0}
    groups, stats = tokenize_groups(tokenizer, [{"trajectories": [plain, plain]}], parse_rl_config({}), random.Random(0))
    assert groups == [] and stats.num_groups_trainable == 0


def test_logprob_less_choices_train_when_allowed(tokenizer):
    choice = {**token_choice(tokenizer, ["yes"]), "logprobs": None}
    group = [{"exchanges": {"chat_completions": [exchange([USER], choice, logprobs=False)]}, "reward": r} for r in (1.0, 0.0)]
    assert [sum(mask) for _, _, mask, _, _ in tokenized(tokenizer, group, allow_training_without_logprobs=True)] == [1, 1]


def test_a_trajectory_with_both_exchanges_and_messages_and_choices_is_refused(tokenizer):
    choice = token_choice(tokenizer, ["yes"])
    both = {"exchanges": {"chat_completions": [exchange([USER], choice)]}, "messages_and_choices": [USER, choice]}
    with pytest.raises(InputError, match=r"trajectories\[0\]: a trajectory has either exchanges or messages_and_choices, not both"):
        tokenized(tokenizer, [{**both, "reward": 1.0}, {**both, "reward": 0.0}])


@pytest.mark.parametrize("index", ["1", 1.5, True, {"n": 1}], ids=["text", "fraction", "bool", "object"])
def test_a_choice_index_that_is_not_an_integer_is_refused_naming_where_it_is(tokenizer, index):
    def trajectory(reward):
        recorded = exchange([USER], token_choice(tokenizer, ["yes"]))
        recorded["response"]["choices"].append({**token_choice(tokenizer, ["no"]), "index": index})
        return {"exchanges": {"chat_completions": [recorded]}, "reward": reward}

    with pytest.raises(InputError, match=r"^inputs line 1\.trajectories\[0\]\.exchanges\.chat_completions\[0\]\.response\.choices\[1\]\.index "
                                         "must be an integer, got "):
        tokenized(tokenizer, [trajectory(1.0), trajectory(0.0)])


def exchange_groups(tokenizer, logprobs=True):
    def trajectory(word, reward):
        choice = token_choice(tokenizer, [word, "<|im_end|>"], [-2.5, -0.3])
        if not logprobs:
            choice["logprobs"] = None
        return {"exchanges": {"chat_completions": [exchange([USER], choice, logprobs=logprobs)]}, "reward": reward}
    return [{"trajectories": [trajectory(w, r) for w, r in zip(["maybe", "yes", "no", "maybe"], rewards)]} for rewards in ((1, 0, 0, 1), (0, 1, 0, 0))]


def test_a_job_of_exchange_only_trajectories_trains(tmp_path, capsys, model_dir, tokenizer):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, exchange_groups(tokenizer), config={"learning_rate": 1e-3})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert [e["type"] for e in events] == ["training_started", "gradient_step", "checkpoint"]
    assert events[1]["data"]["num_trainable_tokens"] == 16  # both sampled tokens of all 8 trajectories
    assert events[-1]["metrics"]["data/step_num_gradient_steps"] == 1


def test_a_job_whose_groups_differ_in_reward_but_have_no_logprobs_exits_3_naming_the_trajectory(tmp_path, capsys, model_dir, tokenizer):
    spec, _ = write_job(str(tmp_path), "rl", model_dir, exchange_groups(tokenizer, logprobs=False))
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 3 and events == [], err
    assert err.strip().splitlines()[-1].startswith(
        "trainyard_trainer: inputs line 1.trajectories[0]: its assistant Choices have no logprobs: request logprobs=True from the engine")
