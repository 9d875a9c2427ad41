"""Tool calls and structured answers against a real batcherd: its embedded
sim calls the function that tool_choice names, with arguments that follow
the function's schema, answers a conversation that ends with a tool result
in text, and answers JSON that follows a json_schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest

import batcher_client as bc
from batcher_client import pb
from conftest import ROOT

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}


@pytest.fixture
def client(batcherd):
    with bc.Client(batcherd, timeout=30) as c:
        yield c


def test_tool_call_round_trip(client):
    weather = bc.tool("get_weather", "The weather in a city now.", WEATHER, strict=True)
    clock = bc.tool("get_time", "The time in a city now.", {"type": "object", "properties": {}})
    question = "What is the weather in Paris?"

    # The model answers with a call of the caller's function.
    first = client.submit(bc.chat("sim-chat", question, tools=[clock, weather], tool_choice="get_weather"))
    assert first.finish_reason == pb.FINISH_REASON_TOOL_CALLS
    (call,) = bc.tool_calls(first)
    assert call.name == "get_weather" and call.id
    args = bc.arguments(call)
    assert set(args) == {"city", "unit"}, args  # additionalProperties: false
    assert isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit")
    assert first.message.content == ""

    # The assistant's turn and the tool's result go back; the answer is text.
    result = {"city": args["city"], "temperature_c": 21}
    turn = bc.assistant(first)
    assert turn.role == "assistant" and list(turn.tool_calls) == [call]
    answer = bc.tool_result(call, result)
    assert answer.role == "tool" and answer.tool_call_id == call.id
    final = client.submit(bc.chat("sim-chat", question, turn, answer, tools=[clock, weather]))
    assert final.finish_reason == pb.FINISH_REASON_STOP
    assert not bc.tool_calls(final)
    # The sim's answer starts from the last message it read: the tool's.
    assert final.text.startswith(json.dumps(result).split()[0]), final.text


def test_tool_round_trip_answer_names_an_unknown_call(client):
    """A tool message answering no call is the caller's mistake, named."""
    weather = bc.tool("get_weather", "", WEATHER)
    bad = pb.ChatMessage(role="user", content="hi", tool_call_id="call_1")
    with pytest.raises(bc.BatcherError) as info:
        client.submit(bc.chat("sim-chat", bad, tools=[weather]))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "messages[0].tool_call_id" in info.value.message


def test_tool_choice_names_no_tool(client):
    weather = bc.tool("get_weather", "", WEATHER)
    with pytest.raises(bc.BatcherError) as info:
        client.submit(bc.chat("sim-chat", "hi", tools=[weather], tool_choice="get_time"))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "tool_choice.function" in info.value.message


def test_tools_on_a_completion_route_are_refused(client):
    req = bc.complete("sim-completion", "hi")
    req.tools.append(bc.tool("get_weather", "", WEATHER))
    with pytest.raises(bc.BatcherError) as info:
        client.submit(req)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "request.tools" in info.value.message


def test_json_schema_strict(client):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "population": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "population", "tags"],
        "additionalProperties": False,
    }
    comp = client.submit(bc.chat("sim-chat", "Describe Paris.",
                                 response_format=bc.json_schema("city", schema)))
    assert comp.finish_reason == pb.FINISH_REASON_STOP
    got = json.loads(comp.text)
    assert set(got) == {"name", "population", "tags"}, got
    assert isinstance(got["name"], str)
    assert isinstance(got["population"], int) and not isinstance(got["population"], bool)
    assert got["population"] >= 0
    assert isinstance(got["tags"], list) and all(isinstance(t, str) for t in got["tags"])


def test_json_object(client):
    comp = client.submit(bc.chat("sim-chat", "Describe Paris.", response_format=bc.json_object()))
    assert isinstance(json.loads(comp.text), dict)


def test_json_schema_without_schema_is_refused(client):
    rf = pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, name="city")
    with pytest.raises(bc.BatcherError) as info:
        client.submit(bc.chat("sim-chat", "hi", response_format=rf))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "request.response_format.schema" in info.value.message


def test_builders():
    assert bc.chat("m", "x", tool_choice="required").tool_choice.mode == pb.TOOL_CHOICE_MODE_REQUIRED
    assert bc.chat("m", "x", tool_choice="none").tool_choice.mode == pb.TOOL_CHOICE_MODE_NONE
    assert bc.chat("m", "x", tool_choice="lookup").tool_choice.function == "lookup"
    assert bc.chat("m", "x", tool_choice=pb.ToolChoice(function="auto")).tool_choice.function == "auto"
    req = bc.chat("m", "x", parallel_tool_calls=False)
    assert req.HasField("parallel_tool_calls") and not req.parallel_tool_calls
    assert not bc.chat("m", "x").HasField("parallel_tool_calls")
    t = bc.tool("f", "d", {"type": "object", "properties": {"n": {"type": "integer"}}}, strict=True)
    assert t.strict and t.parameters["properties"]["n"]["type"] == "integer"
    assert not bc.tool("g").HasField("parameters")
    with pytest.raises(TypeError):
        bc.tool("f", "", ["not", "an", "object"])
    assert bc.tool_result("call_1", "sunny").content == "sunny"
    assert json.loads(bc.tool_result("call_1", {"t": 1}).content) == {"t": 1}
    # A plain text completion has no message: its text is the turn's.
    assert bc.assistant(pb.Completion(text="hello")).content == "hello"
    with pytest.raises(ValueError):
        bc.arguments(pb.ToolCall(arguments="{"))


def test_tools_example(batcherd):
    """clients/python/tools_example.py runs as written against the batcherd
$BATCHER_ADDR names."""
    example = ROOT / "clients" / "python" / "tools_example.py"
    # The address comes from $BATCHER_ADDR when no argument gives one.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "clients" / "python"), BATCHER_ADDR=batcherd)
    out = subprocess.run([sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["call", "answer", "json"], out.stdout
    assert lines[0].startswith("call: get_weather {")
    assert set(json.loads(lines[2][len("json: "):])) == {"name", "population"}
