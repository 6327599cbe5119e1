"""RMD plan schema, validation errors, the template planner and the OpenAI-compatible planner (fake server)."""

import http.server
import json
import threading

import pytest

from core.config import BadInputError
from generative.hoi import plan as plan_lib
from generative.hoi.planner import LLMPlanner, TemplatePlanner, extract_json

GOOD = {"command": "c", "subtasks": [
    {"name": "reach", "edges": [{"human": "hand", "object": "box", "relation": "approach", "distance": 0.1}]},
    {"name": "carry", "edges": [{"human": "hand", "object": "box", "relation": "move_with", "grasp": True}],
     "goal": {"object": "box", "target": "table"}, "hold_steps": 4}]}


def _with(path, value):
    obj = json.loads(json.dumps(GOOD))
    target = obj
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


def test_valid_plan_round_trips():
    p = plan_lib.validate(GOOD)
    assert p.subtasks[1].goal.on_table and p.subtasks[1].hold_steps == 4
    assert p.subtasks[0].edges[0].distance == pytest.approx(0.1)
    assert plan_lib.validate(p.to_json()) == p
    assert plan_lib.validate(json.dumps(GOOD)) == p


@pytest.mark.parametrize("path, value, field", [
    (("subtasks", 0, "edges", 0, "relation"), "hug", "subtasks[0].edges[0].relation='hug'"),
    (("subtasks", 0, "edges", 0, "human"), "foot", "subtasks[0].edges[0].human='foot'"),
    (("subtasks", 0, "edges", 0, "object"), "chair", "subtasks[0].edges[0].object='chair'"),
    (("subtasks", 0, "edges", 0, "distance"), -1.0, "subtasks[0].edges[0].distance=-1.0"),
    (("subtasks", 0, "edges", 0, "relation"), KeyError, "subtasks[0].edges[0].relation=None"),
    (("subtasks", 0, "edges", 0, "grasp"), True, "subtasks[0].edges[0].grasp=True"),  # approach cannot grasp
    (("subtasks", 1, "goal", "target"), [9.0, 0.0], "subtasks[1].goal.target[0]=9.0"),
    (("subtasks", 1, "goal", "target"), "shelf", "subtasks[1].goal.target='shelf'"),
    (("subtasks", 1, "goal", "object"), "lamp", "subtasks[1].goal.object='lamp'"),
    (("subtasks", 1, "hold_steps"), 0, "subtasks[1].hold_steps=0"),
    (("subtasks", 1, "colour"), "red", "subtasks[1].colour='red'"),
    (("subtasks",), [], "subtasks='0 sub-tasks'"),
])
def test_validation_names_the_bad_field(path, value, field):
    with pytest.raises(BadInputError) as e:
        plan_lib.validate(_with(path, value))
    assert str(e.value).startswith(field), str(e.value)


def test_door_goal_and_not_json():
    with pytest.raises(BadInputError, match=r"subtasks\[0\].goal.angle=None"):
        plan_lib.validate({"subtasks": [{"edges": [], "goal": {"object": "door"}}]})
    with pytest.raises(BadInputError, match="subtasks\\[0\\].edges=\\[\\]"):
        plan_lib.validate({"subtasks": [{"edges": []}]})
    with pytest.raises(BadInputError, match="not JSON"):
        plan_lib.validate("{subtasks: ")


def test_template_planner_grammar_and_sequences():
    planner = TemplatePlanner()
    push = planner("Push the box to (0.5, -1)")
    assert [s.name for s in push.subtasks] == ["reach box", "push box", "settle box"]
    assert push.subtasks[1].goal.position == (0.5, -1.0) and push.subtasks[2].goal.position == (0.5, -1.0)
    assert [e.relation for e in push.subtasks[1].edges] == ["contact", "move_with"]
    assert [e.relation for e in push.subtasks[2].edges] == ["hold_still"]
    carry = planner("carry box to table")
    assert carry.subtasks[-1].edges[0].relation == "release" and carry.subtasks[1].edges[0].grasp
    # a part that ends gripping (open door holds the handle) lets go, keeping its goal, before the next part
    seq = planner("open door, then push box to (1, 1)")
    assert [s.name for s in seq.subtasks] == ["reach handle", "open door", "release handle", "reach box",
                                              "push box", "settle box"]
    assert seq.subtasks[1].goal.angle == pytest.approx(1.0) and seq.subtasks[2].goal.angle == pytest.approx(1.0)
    assert [(e.relation, e.object) for e in seq.subtasks[2].edges] == [("release", "handle")]
    assert [s.name for s in planner("open door").subtasks] == ["reach handle", "open door"]
    # carry already ends with the box let go of: nothing inserted
    assert [s.name for s in planner("carry box to table; open door").subtasks] == [
        "reach box", "carry box", "place box", "reach handle", "open door"]
    with pytest.raises(BadInputError, match="'dance'"):
        planner("open door then dance")
    with pytest.raises(BadInputError, match="at most 6"):
        planner("carry box to table then open door then open door")
    with pytest.raises(BadInputError, match="at most 6"):
        planner("open door; push box to (0, 0); reach box")


class _FakeOpenAI(http.server.BaseHTTPRequestHandler):
    reply = ""
    seen: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, self.headers.get("Authorization"), body))
        answer = {"choices": [{"message": {"role": "assistant", "content": type(self).reply}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_llm_planner_against_a_fake_openai_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _FakeOpenAI.reply = "Here is the plan:\n```json\n" + json.dumps(GOOD) + "\n```"
        planner = LLMPlanner(f"http://127.0.0.1:{server.server_port}/v1", "some-model", api_key="k")
        plan = planner("carry the box onto the table")
        assert plan == plan_lib.validate(GOOD)
        path, auth, body = _FakeOpenAI.seen[-1]
        assert path == "/v1/chat/completions" and auth == "Bearer k" and body["model"] == "some-model"
        assert body["messages"][0]["role"] == "system" and body["messages"][-1]["content"].startswith("carry")
        _FakeOpenAI.reply = json.dumps(_with(("subtasks", 0, "edges", 0, "relation"), "hug"))
        with pytest.raises(BadInputError, match="relation='hug'"):
            planner("x")
    finally:
        server.shutdown()


def test_llm_planner_stub_transport_and_bad_replies():
    planner = LLMPlanner("http://unused/v1", "m", transport=lambda url, payload, headers: {"oops": 1})
    with pytest.raises(BadInputError, match="choices"):
        planner("open door")
    with pytest.raises(BadInputError, match="JSON plan"):
        extract_json("no json here")
    with pytest.raises(BadInputError, match="base_url"):
        LLMPlanner("localhost:8000", "m")
    ok = LLMPlanner("http://unused/v1", "m", transport=lambda url, payload, headers: {
        "choices": [{"message": {"content": json.dumps(TemplatePlanner()("open door").to_json())}}]})
    assert ok("open door") == TemplatePlanner()("open door")
