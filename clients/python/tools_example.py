"""A tool-call round trip, then a strict JSON Schema answer (batcherd's
embedded sim calls the function that tool_choice names, with arguments that
follow the function's schema). batcherd's address is the first argument,
else $BATCHER_ADDR, else 127.0.0.1:50051."""

import os
import sys

import batcher_client as bc

weather = bc.tool("get_weather", "The weather in a city now.", {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}, strict=True)


def get_weather(city, unit):  # the caller's own function
    return {"city": city, "temperature": 21 if unit == "celsius" else 70, "unit": unit}


target = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BATCHER_ADDR", "127.0.0.1:50051")
with bc.Client(target, timeout=30) as c:
    question = "What is the weather in Paris?"
    # 1. The model answers with a call of get_weather.
    first = c.submit(bc.chat("sim-chat", question, tools=[weather], tool_choice="get_weather"))
    (call,) = bc.tool_calls(first)
    print("call:", call.name, call.arguments)
    # 2. The caller runs it and sends the assistant's turn and the result back.
    result = get_weather(**bc.arguments(call))
    final = c.submit(bc.chat("sim-chat", question, bc.assistant(first), bc.tool_result(call, result),
                             tools=[weather]))
    print("answer:", final.text)

    # A strict JSON Schema answer.
    city = bc.json_schema("city", {
        "type": "object",
        "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["name", "population"],
        "additionalProperties": False,
    })
    print("json:", c.submit(bc.chat("sim-chat", "Describe Paris.", response_format=city)).text)
