"""Drives a layerstream server with the official ollama package; prints one JSON object of what it got.

Usage: python ollama_client.py HOST API_KEY MODEL
Run by server/interop_test.go (TestOllamaPythonClient), which compares the answers with the OpenAI endpoint's.
"""
import json
import sys
from importlib.metadata import version

import ollama

host, api_key, model = sys.argv[1:4]
client = ollama.Client(host=host, headers={"Authorization": "Bearer " + api_key})
out = {"ollama_version": version("ollama")}

out["models"] = [m.model for m in client.list().models]
show = client.show(model)
out["show"] = {"architecture": show.modelinfo.get("general.architecture"), "capabilities": show.capabilities}

messages = [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}]
options = {"num_predict": 20, "temperature": 0}
chat = client.chat(model=model, messages=messages, options=options)
out["chat"] = {"content": chat.message.content, "role": chat.message.role, "done": chat.done,
               "done_reason": chat.done_reason, "eval_count": chat.eval_count,
               "prompt_eval_count": chat.prompt_eval_count, "total_duration": chat.total_duration}

text, last = "", None
for part in client.chat(model=model, messages=messages, options=options, stream=True):
    text += part.message.content or ""
    last = part
out["chat_stream"] = {"content": text, "done": last.done, "done_reason": last.done_reason, "eval_count": last.eval_count}

gen = client.generate(model=model, prompt="Once upon a time", system="Tell a story.", options=options)
out["generate"] = {"response": gen.response, "eval_count": gen.eval_count}

text = ""
for part in client.generate(model=model, prompt="Once upon a time", system="Tell a story.", options=options, stream=True):
    text += part.response or ""
out["generate_stream"] = {"response": text}

try:
    client.chat(model=model, messages=messages, options={"num_ctx": 4096})
except ollama.ResponseError as e:
    out["refused"] = {"status": e.status_code, "error": e.error}

print(json.dumps(out))
