"""Drives a layerstream server's tool calls and structured output with the official openai package; prints one
JSON object of what it got.

Usage: python openai_tools_client.py BASE_URL API_KEY MODEL
Run by server/interop_test.go (TestOpenAIPythonTools): a call forced by tool_choice "required", the tool's
result sent back with the call for the answer (a round trip), the call streamed, n choices, and a JSON schema
response_format.
"""
import json
import sys

import openai

base_url, api_key, model = sys.argv[1:4]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
out = {}

tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]

first = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="required",
                                       max_tokens=200, temperature=0)
msg = first.choices[0].message
call = msg.tool_calls[0]
out["call"] = {"finish_reason": first.choices[0].finish_reason, "name": call.function.name,
               "arguments": json.loads(call.function.arguments), "id": call.id, "content": msg.content}

messages.append(msg.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})})
second = client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=20, temperature=0)
out["answer"] = {"content": second.choices[0].message.content, "finish_reason": second.choices[0].finish_reason}

calls, finish = {}, None
stream = client.chat.completions.create(model=model, messages=messages[:1], tools=tools, tool_choice="required",
                                        max_tokens=200, temperature=0, stream=True)
for chunk in stream:
    for c in chunk.choices:
        for d in c.delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
            entry["name"] += d.function.name or ""
            entry["arguments"] += d.function.arguments or ""
        finish = c.finish_reason or finish
out["stream"] = {"calls": [calls[i] for i in sorted(calls)], "finish_reason": finish}

many = client.chat.completions.create(model=model, messages=messages[:1], n=3, max_tokens=8, temperature=1, seed=3)
out["n"] = [c.index for c in many.choices]

schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
structured = client.chat.completions.create(
    model=model, messages=messages[:1], max_tokens=150, temperature=0,
    response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}})
out["structured"] = {"content": structured.choices[0].message.content,
                     "finish_reason": structured.choices[0].finish_reason}
print(json.dumps(out))
