"""The server stores client JSON nested up to 256 levels of objects and arrays (docs/tracing.md, "Nesting"); a job
whose inputs reach that bound must still be read and trained by the trainer (Python's json stops near 1,000)."""
from helpers import run_job, write_job
from tiny import token_choice

SERVER_BOUND = 256


def depth(value):
    """Levels of objects and arrays, as the server counts them (a scalar is 0, {} is 1)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            level += 1
            deepest = max(deepest, level)
            stack.extend((child, level) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def nested(levels):
    value = "leaf"
    for i in range(levels):
        value = [value] if i % 2 == 0 else {"d": value}
    return value


def test_an_rl_job_whose_groups_nest_at_the_server_bound_trains(tmp_path, capsys, model_dir, tokenizer):
    groups = [{"trajectories": [{"messages_and_choices": [{"role": "user", "content": "say one word"},
                                                          token_choice(tokenizer, [word, "<|im_end|>"], [-2.5, -0.3])],
                                 "reward": reward,
                                 # group {} > trajectories [] > trajectory {} > metadata {}: four levels before the value
                                 "metadata": {"d": nested(SERVER_BOUND - 4)}}
                                for word, reward in [("maybe", 1), ("yes", 0)]]}]
    assert depth(groups[0]) == SERVER_BOUND
    spec, _ = write_job(str(tmp_path), "rl", model_dir, groups, config={"learning_rate": 1e-3})
    code, events, err = run_job(capsys, spec, "--device", "cpu")
    assert code == 0, err
    assert [e["type"] for e in events] == ["training_started", "gradient_step", "checkpoint"]
