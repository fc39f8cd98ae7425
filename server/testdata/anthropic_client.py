"""Drives a layerstream server with the official anthropic package; prints one JSON object of what it got.

Usage: python anthropic_client.py BASE_URL API_KEY MODEL
Run by server/interop_test.go (TestAnthropicPythonClient), which compares the answers with the OpenAI endpoint's.
The package (2.x) no longer has sampling arguments; temperature 0 (greedy) goes in extra_body.
"""
import json
import sys

import anthropic

base_url, api_key, model = sys.argv[1:4]
client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0)
out = {"anthropic_version": anthropic.__version__}

out["models"] = [{"id": m.id, "type": m.type, "display_name": m.display_name} for m in client.models.list()]
out["model"] = client.models.retrieve(model).id

messages = [{"role": "user", "content": "Once upon a time"}]
msg = client.messages.create(model=model, max_tokens=20, extra_body={"temperature": 0}, system="Tell a story.", messages=messages)
out["message"] = {"text": msg.content[0].text, "role": msg.role, "stop_reason": msg.stop_reason,
                  "output_tokens": msg.usage.output_tokens, "input_tokens": msg.usage.input_tokens}

types, text = [], ""
with client.messages.stream(model=model, max_tokens=20, extra_body={"temperature": 0},
                            system=[{"type": "text", "text": "Tell a story."}], messages=messages) as stream:
    for event in stream:
        if not types or types[-1] != event.type:
            types.append(event.type)
    final = stream.get_final_message()
out["stream"] = {"text": final.content[0].text, "stop_reason": final.stop_reason,
                 "output_tokens": final.usage.output_tokens, "events": types}

text = ""
for event in client.messages.create(model=model, max_tokens=20, extra_body={"temperature": 0}, system="Tell a story.",
                                    messages=messages, stream=True):
    if event.type == "content_block_delta":
        text += event.delta.text
out["raw_stream"] = {"text": text}

stop = client.messages.create(model=model, max_tokens=20, extra_body={"temperature": 0}, system="Tell a story.", messages=messages,
                              stop_sequences=["storm"])
out["stop"] = {"text": stop.content[0].text, "stop_reason": stop.stop_reason, "stop_sequence": stop.stop_sequence}

weather = {"name": "get_weather", "description": "The weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
call = client.messages.create(model=model, max_tokens=200, extra_body={"temperature": 0}, messages=ask,
                              tools=[weather], tool_choice={"type": "any"})
use = [b for b in call.content if b.type == "tool_use"]
out["tool_use"] = {"stop_reason": call.stop_reason, "name": use[0].name if use else None,
                   "input": use[0].input if use else None}
if use:
    ask = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in call.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id, "content": "21 degrees"}]}]
    answer = client.messages.create(model=model, max_tokens=20, extra_body={"temperature": 0}, messages=ask, tools=[weather])
    out["tool_answer"] = {"stop_reason": answer.stop_reason, "text": "".join(b.text for b in answer.content if b.type == "text")}

try:
    client.messages.create(model=model, max_tokens=20, messages=messages, tool_choice={"type": "any"},
                           tools=[{"name": "f", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}}}])
except anthropic.BadRequestError as e:
    out["refused"] = {"status": e.status_code, "message": e.body["error"]["message"] if isinstance(e.body, dict) else str(e)}

try:
    anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0).messages.create(
        model=model, max_tokens=5, messages=messages)
except anthropic.AuthenticationError as e:
    out["wrong_key"] = e.status_code

print(json.dumps(out))
