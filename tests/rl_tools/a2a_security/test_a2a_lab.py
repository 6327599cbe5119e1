"""The lab talks A2A through a2a-sdk: cards at the well-known path, tasks through the SDK's states, and no
traffic can leave the process. Sinks and the sanitiser on hand-made inputs."""

import asyncio

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import proto_helpers as ph
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.signing import SignatureVerificationError

from rl_tools.a2a_security import coordinator as co
from rl_tools.a2a_security import lab as lab_lib
from rl_tools.a2a_security import scenarios

SKILL = scenarios.DOMAINS["travel"][0]


def _request(params, task=None):
    return ph.new_message([ph.new_text_part("book"), ph.new_data_part({"skill": SKILL["id"], "params": params})],
                          role=pb.ROLE_USER, task_id=task.id if task else None,
                          context_id=task.context_id if task else None)


async def _send(client, message):
    task = None
    async for event in client.send_message(pb.SendMessageRequest(message=message)):
        task = event.task
    return task


def test_cards_are_served_and_tasks_move_through_sdk_states():
    async def main():
        lab = lab_lib.Lab()
        card = scenarios.benign_card("travel", SKILL)
        url = lab.add_agent(card)
        asker = lab.add_agent(lab_lib.make_card("asker", "asks once", [SKILL]), lab_lib.Behaviour("input", rounds=1))
        raw = await lab.client.get(url + AGENT_CARD_WELL_KNOWN_PATH)
        assert AGENT_CARD_WELL_KNOWN_PATH == "/.well-known/agent-card.json"
        assert raw.status_code == 200 and raw.json()["name"] == card.name
        resolved = await A2ACardResolver(lab.client, url).get_agent_card()
        assert resolved.name == card.name and resolved.skills[0].id == SKILL["id"]

        client = ClientFactory(ClientConfig(httpx_client=lab.client, streaming=False)).create(resolved)
        params = {"city": "Oslo", "reference": "REF-1"}
        done = await _send(client, _request(params))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert ph.get_artifact_text(done.artifacts[0]) == lab_lib.expected_answer(SKILL["id"], params)

        asker_client = ClientFactory(ClientConfig(httpx_client=lab.client, streaming=False)).create(
            await A2ACardResolver(lab.client, asker).get_agent_card())
        waiting = await _send(asker_client, _request(params))
        assert waiting.status.state == pb.TASK_STATE_INPUT_REQUIRED
        finished = await _send(asker_client, _request(params, waiting))
        assert finished.id == waiting.id and finished.status.state == pb.TASK_STATE_COMPLETED
        states = [m.status.state for m in (await asker_client.list_tasks(pb.ListTasksRequest())).tasks]
        assert states == [pb.TASK_STATE_COMPLETED]
        await lab.close()
    asyncio.run(main())


def test_no_traffic_leaves_the_process():
    async def main():
        lab = lab_lib.Lab()
        lab.add_agent(scenarios.benign_card("travel", SKILL))
        with pytest.raises(httpx.ConnectError, match="no route to example.com"):
            await lab.client.get("http://example.com/")
        with pytest.raises(httpx.ConnectError, match="no route to 127.0.0.1"):
            await lab.client.get("http://127.0.0.1:80/")
        await lab.close()
    asyncio.run(main())
    recorder = lab_lib.UriRecorder()
    with pytest.raises(PermissionError, match="refuses to dereference https://example.com/x"):
        recorder.fetch("https://example.com/x")
    assert lab_lib.CANARY in recorder.fetch(f"http://{lab_lib.CANARY_HOST}/creds") and recorder.canary_leaks == 1


@pytest.mark.parametrize("markup, active", [
    ("<p>ok</p>", []),
    ('<p>x</p><script>alert(1)</script>', ["<script>"]),
    ('<img src="a.png" onerror="x()">', ["img[onerror]"]),
    ('<a href=" JavaScript:x()">d</a>', ["a[href=javascript:]"]),
])
def test_active_content_and_sanitiser(markup, active):
    assert lab_lib.active_content(markup) == active
    clean = co.sanitize(markup)
    assert lab_lib.active_content(clean) == []
    if not active:
        assert clean == markup  # inert markup passes unchanged: no false positive


def test_sanitiser_keeps_text_and_escapes():
    assert co.sanitize('<p onclick="x()">a &amp; b</p><script>bad()</script>tail') == "<p>a &amp; b</p>tail"


def test_signed_cards_verify_and_tampering_is_detected():
    verify = co.registry_verifier()
    card = co.sign_card(scenarios.benign_card("finance", scenarios.DOMAINS["finance"][0]))
    verify(card)  # no exception
    card.description = "now also moves money"
    with pytest.raises(SignatureVerificationError):
        verify(card)
    forged = co.sign_card(scenarios.benign_card("finance", scenarios.DOMAINS["finance"][1]),
                          key=b"attacker-key-of-32-bytes-or-more!")
    with pytest.raises(SignatureVerificationError):
        verify(forged)
