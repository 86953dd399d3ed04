"""The weave Python SDK, unchanged, against trainyard's tracing API (/traces) and GraphQL (/graphql).

weave drops batches on a 4xx without raising, so every test reads what it wrote back through trainyard's
HTTP API and compares; conftest fails any test during which weave logged a dropped batch."""

from __future__ import annotations

import asyncio
import io
import uuid

import openai
import pytest
import weave
from PIL import Image


@pytest.fixture(params=["calls_complete", "upsert_batch"])
def write_path(request, monkeypatch):
    """Both write paths of the SDK: v2 calls/complete (default) and the legacy call/upsert_batch."""
    monkeypatch.setenv("WEAVE_USE_CALLS_COMPLETE", "true" if request.param == "calls_complete" else "false")
    return request.param


@pytest.fixture
def project(stack, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", stack.key)
    return f"{stack.entity}/weave-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(project, write_path):
    client = weave.init(project)
    assert client.entity + "/" + client.project == project
    yield client
    weave.finish()


def read_calls(stack, project: str, **query) -> list[dict]:
    return stack.jsonl("/traces/calls/stream_query", {"project_id": project, **query})


def by_op(calls: list[dict], name: str) -> list[dict]:
    return [c for c in calls if f"/op/{name}:" in c["op_name"]]


def test_init_answers_the_graphql_and_server_info_handshake(stack, client, project):
    assert client.project == project.split("/")[1]
    status, info = stack.request("GET", "/traces/server_info")
    assert status == 200
    from packaging.version import Version  # noqa: PLC0415
    from weave.trace_server_version import MIN_TRACE_SERVER_VERSION  # noqa: PLC0415

    assert Version(info["min_required_weave_python_version"]) <= Version(weave.__version__)
    assert MIN_TRACE_SERVER_VERSION is None or Version(info["trace_server_version"]) >= Version(MIN_TRACE_SERVER_VERSION)


def test_nested_ops_with_an_exception_and_a_large_input(stack, client, project, write_path):
    @weave.op
    def halve(x: int) -> float:
        if x < 0:
            raise ValueError(f"negative: {x}")
        return x / 2

    @weave.op
    def run(xs: list[int], blob: str) -> list:
        out = []
        for x in xs:
            try:
                out.append(halve(x))
            except ValueError:
                out.append(None)
        return out

    blob = "x" * 300_000
    assert run([4, -1], blob) == [2.0, None]
    client.flush()

    calls = read_calls(stack, project)
    [parent] = by_op(calls, "run")
    children = by_op(calls, "halve")
    assert parent["inputs"]["xs"] == [4, -1]
    assert parent["inputs"]["blob"] == blob
    assert parent["output"] == [2.0, None]
    assert parent["exception"] is None
    assert sorted(c["parent_id"] for c in children) == [parent["id"], parent["id"]]
    assert {c["trace_id"] for c in children} == {parent["trace_id"]}
    failed = [c for c in children if c["exception"]]
    assert len(failed) == 1 and "negative: -1" in failed[0]["exception"]
    assert [c["output"] for c in children if not c["exception"]] == [2.0]
    assert all(c["ended_at"] for c in calls)


def test_image_and_file_are_stored_as_files_and_read_back(stack, client, project, write_path, tmp_path):
    @weave.op
    def draw(color: str) -> Image.Image:
        return Image.new("RGB", (4, 3), color)

    @weave.op
    def read_note(note: weave.Content) -> str:
        return note.data.decode()

    note = tmp_path / "note.txt"
    note.write_text("a note on disk\n")
    draw("red")
    read_note(weave.Content.from_path(note))
    client.flush()
    [with_file] = by_op(read_calls(stack, project), "read_note")
    assert with_file["output"] == "a note on disk\n"
    assert client.get_call(with_file["id"]).inputs["note"].data == b"a note on disk\n"
    [call] = by_op(read_calls(stack, project), "draw")
    assert call["output"]["weave_type"] == {"type": "PIL.Image.Image"}
    png = stack.raw("POST", "/traces/files/content", {"project_id": project, "digest": call["output"]["files"]["image.png"]})
    stored = Image.open(io.BytesIO(png))
    assert stored.size == (4, 3) and stored.convert("RGB").getpixel((0, 0)) == (255, 0, 0)

    image = client.get_call(call["id"]).output
    assert image.size == (4, 3) and image.getpixel((0, 0)) == (255, 0, 0)


def test_publish_dataset_model_and_object_and_read_refs_back(stack, client, project):
    class Greeter(weave.Model):
        greeting: str

        @weave.op
        def predict(self, name: str) -> str:
            return f"{self.greeting}, {name}"

    dataset = weave.Dataset(name="people", rows=[{"name": "ada", "expected": "hi, ada"}, {"name": "bob", "expected": "hi, bob"}])
    dataset_ref = weave.publish(dataset)
    model_ref = weave.publish(Greeter(greeting="hi"), name="greeter")
    object_ref = weave.publish({"temperature": 0.5, "tags": ["a", "b"]}, name="settings")

    rows = weave.ref(dataset_ref.uri()).get().rows
    assert [dict(r) for r in rows] == [{"name": "ada", "expected": "hi, ada"}, {"name": "bob", "expected": "hi, bob"}]
    greeter = weave.ref(model_ref.uri()).get()
    assert greeter.greeting == "hi" and greeter.predict("cy") == "hi, cy"
    assert weave.ref(object_ref.uri()).get() == {"temperature": 0.5, "tags": ["a", "b"]}

    # The same objects through the HTTP API.
    read = stack.ok("POST", "/traces/obj/read", {"project_id": project, "object_id": "settings", "digest": object_ref.digest})
    assert read["obj"]["val"] == {"temperature": 0.5, "tags": ["a", "b"]}
    objects = stack.ok("POST", "/traces/objs/query", {"project_id": project, "filter": {"latest_only": True}})["objs"]
    assert {o["object_id"] for o in objects} >= {"people", "greeter", "settings"}
    table = stack.ok("POST", "/traces/table/query", {"project_id": project, "digest": rows.table_ref.digest})["rows"]
    assert [r["val"] for r in table] == [{"name": "ada", "expected": "hi, ada"}, {"name": "bob", "expected": "hi, bob"}]
    # What the web UI's Datasets screen reads: the datasets by base class, each naming its rows table by ref.
    datasets = stack.ok(
        "POST", "/traces/objs/query", {"project_id": project, "filter": {"base_object_classes": ["Dataset"], "latest_only": True}}
    )["objs"]
    assert [(d["object_id"], d["val"]["rows"]) for d in datasets] == [("people", f"weave:///{project}/table/{rows.table_ref.digest}")]



def test_tags_and_aliases_with_the_sdk_functions(stack, client, project):
    v0 = weave.publish({"v": 0}, name="prompt")
    v1 = weave.publish({"v": 1}, name="prompt", tags=["candidate"], aliases=["staging"])
    weave.add_tags(v0, ["reviewed", "baseline"])
    weave.remove_tags(v0, ["baseline"])
    assert weave.get_tags(v0) == ["reviewed"]
    assert weave.get_tags(v1) == ["candidate"]
    assert weave.get_aliases(v1) == ["latest", "staging"]
    assert weave.ref("prompt:staging").get() == {"v": 1}

    # An alias names one version: setting it on v0 moves it there.
    weave.set_aliases(v0, "staging")
    assert weave.ref("prompt:staging").get() == {"v": 0}
    assert weave.get_aliases(v1) == ["latest"]
    assert weave.list_tags() == ["candidate", "reviewed"]
    assert weave.list_aliases() == ["staging"]

    weave.remove_aliases(v0, "staging")
    # The server answers 404 "Obj prompt:staging not found"; weave 0.54 words the error itself, older releases pass the reason on.
    with pytest.raises(ValueError, match="Unable to read object|Obj prompt:staging not found"):
        weave.ref("prompt:staging").get()

    # The same labels through the HTTP API.
    objs = stack.ok(
        "POST",
        "/traces/objs/query",
        {"project_id": project, "filter": {"object_ids": ["prompt"], "tags": ["reviewed"]}, "include_tags_and_aliases": True},
    )["objs"]
    assert [(o["digest"], o["tags"], o["aliases"]) for o in objs] == [(v0.digest, ["reviewed"], [])]

def test_evaluation_with_scorers(stack, client, project, write_path):
    class Echo(weave.Model):
        @weave.op
        def predict(self, question: str) -> str:
            return question.upper()

    @weave.op
    def exact(expected: str, output: str) -> dict:
        return {"correct": expected == output}

    dataset = weave.Dataset(name="qa", rows=[{"question": "a", "expected": "A"}, {"question": "b", "expected": "x"}])
    evaluation = weave.Evaluation(name="echo-eval", dataset=dataset, scorers=[exact])
    summary = asyncio.run(evaluation.evaluate(Echo()))
    assert summary["exact"]["correct"]["true_count"] == 1
    client.flush()

    calls = read_calls(stack, project)
    [evaluate] = [c for c in calls if "Evaluation.evaluate" in c["op_name"]]
    assert evaluate["output"]["exact"]["correct"]["true_count"] == 1
    # What the web UI's evaluation run page asks for: the run's scored rows, each dataset row expanded from its ref.
    rows = stack.ok(
        "POST",
        "/traces/calls/query",
        {
            "project_id": project,
            "filter": {"parent_ids": [evaluate["id"]]},
            "query": {"$expr": {"$contains": {"input": {"$getField": "op_name"}, "substr": {"$literal": "Evaluation.predict_and_score:"}}}},
            "sort_by": [{"field": "started_at", "direction": "asc"}],
            "expand_columns": ["inputs.example"],
        },
    )["calls"]
    assert sorted((r["inputs"]["example"]["question"], r["output"]["output"], r["output"]["scores"]["exact"]["correct"]) for r in rows) == [
        ("a", "A", True),
        ("b", "B", False),
    ]
    assert evaluate["ended_at"] is not None
    assert len(by_op(calls, "exact")) == 2
    assert sorted(c["output"] for c in calls if "Echo.predict" in c["op_name"]) == ["A", "B"]


def test_get_calls_with_filter_query_and_sort_match_the_api(stack, client, project):
    @weave.op
    def square(x: int) -> int:
        return x * x

    @weave.op
    def other(x: int) -> int:
        return x

    for x in (3, 1, 2):
        square(x)
    other(5)
    client.flush()

    square_ref = [c for c in read_calls(stack, project) if "/op/square:" in c["op_name"]][0]["op_name"]
    found = client.get_calls(
        filter={"op_names": [square_ref]},
        query={"$expr": {"$gt": [{"$getField": "inputs.x"}, {"$literal": 1}]}},
        sort_by=[{"field": "inputs.x", "direction": "desc"}],
    )
    assert [c.inputs["x"] for c in found] == [3, 2]
    api = read_calls(
        stack,
        project,
        filter={"op_names": [square_ref]},
        query={"$expr": {"$gt": [{"$getField": "inputs.x"}, {"$literal": 1}]}},
        sort_by=[{"field": "inputs.x", "direction": "desc"}],
    )
    assert [c["id"] for c in api] == [c.id for c in found]
    assert len(client.get_calls(filter={"op_names": [square_ref]})) == 3


def test_get_calls_reads_usage_of_a_model_name_holding_dots_and_names_the_user(stack, client, project):
    """weave's servers split field paths at dots not escaped with a backslash, so a usage key such as a
    model name with a version (`Qwen2.5`) can be filtered and sorted on; include_usernames names the
    user of each call's wb_user_id."""
    model = "Qwen/Qwen2.5-7B-Instruct"

    @weave.op
    def chat(n: int) -> dict:
        return {"model": model, "usage": {"prompt_tokens": n, "completion_tokens": n, "total_tokens": 2 * n}}

    for n in (5, 50, 20):
        chat(n)
    client.flush()

    field = "summary.usage." + model.replace(".", "\\.") + ".total_tokens"
    found = client.get_calls(
        query={"$expr": {"$gt": [{"$getField": field}, {"$literal": 30}]}},
        sort_by=[{"field": field, "direction": "desc"}],
        include_usernames=True,
    )
    assert [c.summary["usage"][model]["total_tokens"] for c in found] == [100, 40]
    assert [c.wb_username for c in found] == [stack.username, stack.username]
    assert [c.wb_username for c in client.get_calls()] == [None, None, None]


def test_get_calls_reads_every_call_across_pages_while_calls_are_deleted(stack, client, project):
    """The SDK reads get_calls() in pages of 1,000 by offset. Deleting a call of a page already read does
    not make the next page skip the call after it (each page starts after the last call of the one before)."""
    count = 2150
    ids = [f"c{i:05d}" for i in range(count)]
    items = []
    for i, call_id in enumerate(ids):
        started = f"2025-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}.{i // 3600:06d}Z"
        start = {"project_id": project, "id": call_id, "trace_id": call_id, "op_name": "step", "started_at": started, "attributes": {}, "inputs": {"i": i}}
        end = {"project_id": project, "id": call_id, "ended_at": started, "output": i, "summary": {}}
        items += [{"mode": "start", "req": {"start": start}}, {"mode": "end", "req": {"end": end}}]
    for chunk in range(0, len(items), 1000):
        stack.ok("POST", "/traces/call/upsert_batch", {"batch": items[chunk : chunk + 1000]})

    read = []
    for call in client.get_calls(columns=["inputs"]):
        read.append(call.id)
        if len(read) == 500:  # the first page is in hand: delete one of its calls
            stack.ok("POST", "/traces/calls/delete", {"project_id": project, "call_ids": [ids[10]]})
    assert read == ids


def test_integers_beyond_a_double_read_back_exactly_and_filter_exactly(stack, client, project, write_path):
    """Python ints are unbounded: a 63-bit seed logged as an input, and ids beyond 2^64 in an output, read back
    digit for digit, and a query literal matches the seed and not its neighbour (both are the same double)."""

    @weave.op
    def sample(seed: int) -> dict:
        return {"seed": seed, "ids": [2**64 + 1, -(2**53) - 1]}

    seed = 2**63 - 1
    sample(seed)
    sample(seed - 1)
    client.flush()

    found = client.get_calls(query={"$expr": {"$eq": [{"$getField": "inputs.seed"}, {"$literal": seed}]}})
    assert [c.inputs["seed"] for c in found] == [seed]
    assert found[0].output == {"seed": seed, "ids": [2**64 + 1, -(2**53) - 1]}
    assert sorted(c["inputs"]["seed"] for c in read_calls(stack, project)) == [seed - 1, seed]


def test_whole_floats_read_back_as_floats(stack, client, project, write_path):
    """A float with a whole value stays a float (1.0, not 1) in inputs, output, summary and feedback, as the
    Python server keeps it, so a pandas column of scores stays float64; ints stay ints."""

    @weave.op
    def score(temperature: float, tries: int) -> dict:
        return {"reward": 1.0, "losses": [0.0, 0.5, 2.0], "big": 1e16, "count": 3}

    _, scored = score.call(1.0, 2)
    scored.feedback.add("rating", {"stars": 5.0, "seed": 2**63 - 1})
    client.flush()

    (call,) = client.get_calls()
    assert call.inputs == {"temperature": 1.0, "tries": 2}
    # weave boxes the values it reads (BoxedFloat is a float, BoxedInt an int).
    assert isinstance(call.inputs["temperature"], float) and not isinstance(call.inputs["tries"], float)
    assert call.output == {"reward": 1.0, "losses": [0.0, 0.5, 2.0], "big": 1e16, "count": 3}
    assert [isinstance(call.output[k], float) for k in ("reward", "big", "count")] == [True, True, False]
    assert all(isinstance(x, float) for x in call.output["losses"])
    (row,) = read_calls(stack, project)
    assert type(row["inputs"]["temperature"]) is float and type(row["output"]["count"]) is int
    (rating,) = [f for f in client.get_call(call.id).feedback if f.feedback_type == "rating"]
    assert rating.payload == {"stars": 5.0, "seed": 2**63 - 1}
    assert isinstance(rating.payload["stars"], float)


def test_feedback_reactions_notes_and_scorer_results(stack, client, project, write_path):
    @weave.op
    def answer(q: str) -> str:
        return "42"

    class LengthScorer(weave.Scorer):
        @weave.op
        def score(self, output: str) -> dict:
            return {"length": len(output)}

    _, call = answer.call("what?")
    call.feedback.add_reaction("👍")
    call.feedback.add_note("looks right")
    asyncio.run(call.apply_scorer(LengthScorer()))
    client.flush()

    feedback = stack.ok("POST", "/traces/feedback/query", {"project_id": project})["result"]
    kinds = sorted((f["feedback_type"], f["weave_ref"].endswith(call.id)) for f in feedback)
    assert kinds == sorted([("wandb.reaction.1", True), ("wandb.note.1", True), ("wandb.runnable.LengthScorer", True)])
    by_type = {f["feedback_type"]: f for f in feedback}
    assert by_type["wandb.reaction.1"]["payload"]["emoji"] == "👍"
    assert by_type["wandb.note.1"]["payload"]["note"] == "looks right"
    assert by_type["wandb.runnable.LengthScorer"]["payload"]["output"] == {"length": 2}
    assert sorted(f.feedback_type for f in client.get_call(call.id).feedback) == sorted(by_type)


def test_display_name_update_and_call_deletion(stack, client, project, write_path):
    @weave.op
    def step(i: int) -> int:
        return i

    _, keep = step.call(1)
    _, drop = step.call(2)
    client.flush()
    keep.set_display_name("the keeper")
    drop.delete()
    client.flush()

    calls = {c["id"]: c for c in read_calls(stack, project)}
    assert calls[keep.id]["display_name"] == "the keeper"
    assert drop.id not in calls


def test_threads_group_calls(stack, client, project, write_path):
    @weave.op
    def turn(text: str) -> str:
        return text[::-1]

    with weave.thread("conversation-1"):
        turn("hello")
        turn("again")
    turn("outside")
    client.flush()

    calls = by_op(read_calls(stack, project), "turn")
    assert sorted((c["inputs"]["text"], c["thread_id"]) for c in calls) == [("again", "conversation-1"), ("hello", "conversation-1"), ("outside", None)]
    threads = stack.jsonl("/traces/threads/stream_query", {"project_id": project})
    assert [(t["thread_id"], t["turn_count"]) for t in threads] == [("conversation-1", 2)]
    # What the web UI's thread page asks for: the thread's turn calls (those whose turn_id is their own id), in order.
    turns = read_calls(
        stack,
        project,
        filter={"thread_ids": ["conversation-1"]},
        query={"$expr": {"$eq": [{"$getField": "turn_id"}, {"$getField": "id"}]}},
        sort_by=[{"field": "started_at", "direction": "asc"}],
    )
    assert [c["inputs"]["text"] for c in turns] == ["hello", "again"]


def test_openai_integration_traces_a_chat_completion_through_the_gateway(stack, client, project, write_path):
    from packaging.version import Version  # noqa: PLC0415

    if Version(weave.__version__) < Version("0.53"):
        # Client side: with openai 2.x, weave 0.52's integration records no call at all (nothing is sent,
        # no batch is dropped), so there is nothing for the server to store.
        pytest.skip("weave 0.52's openai integration does not trace openai 2.x")
    from weave.integrations import patch_openai  # noqa: PLC0415

    patch_openai()
    completion = openai.OpenAI(base_url=stack.v1, api_key=stack.key, max_retries=0).chat.completions.create(
        model=stack.base_model, messages=[{"role": "user", "content": "hello"}], max_tokens=3
    )
    client.flush()

    calls = [c for c in read_calls(stack, project) if "openai.chat.completions.create" in c["op_name"]]
    assert len(calls) == 1
    assert calls[0]["inputs"]["model"] == stack.base_model
    assert calls[0]["output"]["choices"][0]["message"]["content"] == completion.choices[0].message.content
    assert calls[0]["summary"]["usage"][stack.base_model]["total_tokens"] == completion.usage.total_tokens
