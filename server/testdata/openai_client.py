"""Drives a layerstream server with the official openai package; prints one JSON object of what it got.

Usage: python openai_client.py BASE_URL API_KEY MODEL
Run by server/interop_test.go (TestOpenAIPythonClient), which compares the answers with the engine's own.
"""
import json
import sys

import openai

base_url, api_key, model = sys.argv[1:4]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
out = {"openai_version": openai.__version__}

out["models"] = [m.id for m in client.models.list().data]

chat = client.chat.completions.create(
    model=model,
    messages=[{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}],
    max_tokens=20, temperature=0, logprobs=True, top_logprobs=2, seed=1)
out["chat"] = {
    "content": chat.choices[0].message.content,
    "role": chat.choices[0].message.role,
    "finish_reason": chat.choices[0].finish_reason,
    "completion_tokens": chat.usage.completion_tokens,
    "logprobs": len(chat.choices[0].logprobs.content),
    "top_logprobs": len(chat.choices[0].logprobs.content[0].top_logprobs),
}

text, finish, usage = "", None, None
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}],
    max_tokens=20, temperature=0, stream=True, stream_options={"include_usage": True})
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage.completion_tokens
    for c in chunk.choices:
        text += c.delta.content or ""
        finish = c.finish_reason or finish
out["chat_stream"] = {"content": text, "finish_reason": finish, "completion_tokens": usage}

comp = client.completions.create(model=model, prompt="Once upon a time", max_tokens=30, temperature=0, stop=["Lily"])
out["completion"] = {"text": comp.choices[0].text, "finish_reason": comp.choices[0].finish_reason}

text = ""
for chunk in client.completions.create(model=model, prompt="Once upon a time", max_tokens=30, temperature=0, stream=True):
    text += chunk.choices[0].text if chunk.choices else ""
out["completion_stream"] = {"text": text}

try:
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], extra_body={"typical_p": 0.9})
    out["refused"] = None
except openai.BadRequestError as e:
    out["refused"] = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None}

try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    out["wrong_key"] = None
except openai.AuthenticationError as e:
    out["wrong_key"] = e.status_code

print(json.dumps(out))
