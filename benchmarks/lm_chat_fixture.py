"""Generate the chat-template fixture for core.lm.chat (needs transformers: `pip install -e .[torch]`).

Four templates written for this project exercise what real model templates do (a ChatML / Qwen2.5-style one
with tools, tool calls and tool responses; a Llama-3-style one with bos and header tokens; a Llama-2 /
Mistral-style one that calls `raise_exception` on a bad role or order; one using `namespace()`, loop.last /
previtem, `break` / `continue`, `tojson` with indent, `{% generation %}` and reasoning content). Each is rendered
by transformers' own `tokenizer.apply_chat_template(..., tokenize=False)` on every conversation below, with the
generation prompt on and off; a failed render is stored as the error transformers raised. Two tokenizer folders
written by transformers' `save_pretrained` (the v5 `chat_template.jinja` layout, and the legacy layout with a
list of named templates inside `tokenizer_config.json`) are stored file by file, with what transformers renders
after loading them back:

    .venv/bin/python benchmarks/lm_chat_fixture.py   # writes tests/core/lm/fixtures/chat_templates.json

`tests/core/lm/test_lm_chat.py` compares core.lm.chat string for string (no transformers needed) and, when
transformers is importable, renders live.
"""

from __future__ import annotations

import json
import pathlib
import tempfile

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "tests" / "core" / "lm" / "fixtures" / "chat_templates.json"

CHATML_TOOLS = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}\
{%- else %}{{- 'You are a helpful assistant.\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions. Their signatures are inside <tools></tools>:\\n<tools>' }}
{%- for tool in tools %}
{{- '\\n' }}{{- tool | tojson }}
{%- endfor %}
{{- '\\n</tools>\\n\\nFor each call, return a JSON object inside <tool_call></tool_call>.<|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls %}
{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' + call.name + '", "arguments": ' }}
{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

LLAMA3_HEADERS = """\
{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}
{{- 'Today Date: ' + date_string + '\\n\\n' }}
{%- if tools is not none %}
    {{- 'Answer with a function call as {"name": function name, "parameters": dict of arguments}.\\n\\n' }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- '\\n\\n' }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- '<|eot_id|>' }}
{%- for message in messages %}
    {%- if message.role in ['ipython', 'tool'] %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls | length == 1 %}
            {{- raise_exception('This template supports one tool call per message, got ' ~ \
message.tool_calls | length) }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- '}<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + \
'<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

STRICT_ROLES = """\
{# no whitespace control here: trim_blocks and lstrip_blocks alone decide the layout #}
{% if messages[0]['role'] == 'system' %}
    {% set loop_messages = messages[1:] %}
    {% set system_message = messages[0]['content'] %}
{% else %}
    {% set loop_messages = messages %}
    {% set system_message = false %}
{% endif %}
{{ bos_token }}
{% for message in loop_messages %}
    {% if message['role'] not in ['user', 'assistant'] %}
        {{ raise_exception('Only user and assistant roles are supported after an optional system message, got ' + \
message['role']) }}
    {% endif %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% if message['role'] == 'user' %}
        {% if loop.first and system_message %}
[INST] <<SYS>>
{{ system_message }}
<</SYS>>

{{ message['content'] | trim }} [/INST]
        {% else %}
[INST] {{ message['content'] | trim }} [/INST]
        {% endif %}
    {% else %}
 {{ message['content'] | trim }} {{ eos_token }}
    {% endif %}
{% endfor %}
"""

NAMESPACE_LOOP = """\
{%- set ns = namespace(last_user=-1, n_tool=0, first_system=none) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}
    {%- if message.role == 'tool' %}{%- set ns.n_tool = ns.n_tool + 1 %}{%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- set ns.first_system = message.content %}
        {%- break %}
    {%- endif %}
{%- endfor %}
{%- if ns.first_system is not none %}<|system|>{{ ns.first_system }}
{% endif %}
{%- if tools %}<|tools|>{{ tools | tojson(indent=2) }}
{% endif %}
{%- for message in messages %}
    {%- if message.role == 'system' %}{% continue %}{% endif %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'assistant' %}
        {%- set reasoning = message.reasoning_content | default('') %}
<|assistant|>
{% if reasoning and loop.index0 > ns.last_user %}<think>{{ reasoning | trim }}</think>
{% endif %}
{%- generation %}{{ content }}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
<call>{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson(sort_keys=true) }}</call>\
{% if not loop.last %},{% endif %}
{%- endfor %}
{%- endif %}{{ eos_token }}{% endgeneration %}
    {%- elif message.role == 'tool' %}
<|tool {{ message.name | default('?') }}|>{{ content }}
    {%- else %}
<|{{ message.role }}|>
{{ content }}
    {%- endif %}
    {%- if loop.last and message.role == 'user' and not add_generation_prompt %} (end){% endif %}
{%- endfor %}
{%- if ns.n_tool %}
<|stats|>{{ ns.n_tool }} tool results of {{ messages | length }} messages; {{ dict(a=1, b=[ns.last_user]) | tojson }}
{%- endif %}
{%- if add_generation_prompt %}
<|assistant|>
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% endif %}
{%- endif %}
"""

TEMPLATES = {
    "chatml_tools": dict(template=CHATML_TOOLS, special_tokens={"eos_token": "<|im_end|>",
                                                                "pad_token": "<|endoftext|>"}),
    "llama3_headers": dict(template=LLAMA3_HEADERS, special_tokens={"bos_token": "<|begin_of_text|>",
                                                                    "eos_token": "<|eot_id|>"},
                           extra={"date_string": "26 Jul 2024"}),
    "strict_roles": dict(template=STRICT_ROLES, special_tokens={"bos_token": "<s>", "eos_token": "</s>",
                                                                "unk_token": "<unk>"}),
    "namespace_loop": dict(template=NAMESPACE_LOOP, special_tokens={"eos_token": "<|end|>"},
                           extra={"enable_thinking": False}),
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current temperature at a place.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City and country, e.g. Zürich, Switzerland"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}}}
CALC = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}


def _call(name: str, arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = {
    "single_user": dict(messages=[{"role": "user", "content": "What is 2 + 2?"}]),
    "system_multi_turn": dict(messages=[
        {"role": "system", "content": "You are terse.  "},
        {"role": "user", "content": "  Name a prime. "},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one, größer als 10 — bitte."}]),
    "tools_one_call": dict(tools=[WEATHER, CALC], messages=[
        {"role": "system", "content": "Use the tools when they help."},
        {"role": "user", "content": "How warm is it in Zürich?"},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("get_weather", {"location": "Zürich, Switzerland", "unit": "celsius"})]},
        {"role": "tool", "name": "get_weather", "tool_call_id": "call_0", "content": "21.5"},
        {"role": "assistant", "content": "It is 21.5 °C in Zürich."},
        {"role": "user", "content": "Thanks!"}]),
    "tools_parallel_calls": dict(tools=[CALC], messages=[
        {"role": "user", "content": "Add 1+2 and 30+40."},
        {"role": "assistant", "content": "Calling the tool twice.",
         "tool_calls": [_call("add", {"a": 1, "b": 2}), _call("add", '{"a": 30, "b": 40}')]},
        {"role": "tool", "name": "add", "content": "3"},
        {"role": "tool", "name": "add", "content": "70"}]),
    "reasoning": dict(messages=[
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No: 91 = 7 x 13."},
        {"role": "user", "content": "And 97?"},
        {"role": "assistant", "thinking": "No divisor up to 9 divides 97.", "content": "Yes."}]),
    "bad_role": dict(messages=[{"role": "user", "content": "hi"}, {"role": "bot", "content": "hello"}]),
    "not_alternating": dict(messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
}


def _tokenizer(special_tokens: dict, chat_template):
    """A tiny word-level fast tokenizer that knows the special tokens (the template only sees their text)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[UNK]", *sorted(set(special_tokens.values()))])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=chat_template, **special_tokens)


def _render(tokenizer, conversation: dict, add_generation_prompt: bool, extra: dict) -> dict:
    try:
        text = tokenizer.apply_chat_template(conversation["messages"], tools=conversation.get("tools"),
                                             add_generation_prompt=add_generation_prompt, tokenize=False, **extra)
    except Exception as e:  # noqa: BLE001 - the fixture records what transformers raised
        return {"error": f"{type(e).__name__}: {e}"}
    return {"text": text}


def _folder_files(folder: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*"))
            if p.is_file()}


def render_all() -> dict:
    """Every template on every conversation, generation prompt off and on, rendered by transformers."""
    renders = []
    for tname, spec in TEMPLATES.items():
        tok = _tokenizer(spec["special_tokens"], spec["template"])
        for cname, conv in CONVERSATIONS.items():
            for gen in (False, True):
                renders.append(dict(template=tname, conversation=cname, add_generation_prompt=gen,
                                    **_render(tok, conv, gen, spec.get("extra", {}))))
    return {"templates": TEMPLATES, "conversations": CONVERSATIONS, "renders": renders}


def saved_folders() -> dict:
    """Tokenizer folders written by transformers, with what transformers renders after reloading them."""
    from transformers import AutoTokenizer

    layouts = {
        # transformers 5: the template goes to chat_template.jinja beside tokenizer_config.json
        "jinja_file": dict(spec="chatml_tools", templates=CHATML_TOOLS, save_jinja_files=True),
        # legacy: several named templates as a list inside tokenizer_config.json
        "config_list": dict(spec="llama3_headers", templates={"default": STRICT_ROLES, "tool_use": LLAMA3_HEADERS},
                            save_jinja_files=False),
    }
    out = {}
    for name, layout in layouts.items():
        spec = TEMPLATES[layout["spec"]]
        with tempfile.TemporaryDirectory() as tmp:
            _tokenizer(spec["special_tokens"], layout["templates"]).save_pretrained(
                tmp, save_jinja_files=layout["save_jinja_files"])
            files = _folder_files(pathlib.Path(tmp))
            loaded = AutoTokenizer.from_pretrained(tmp)
        renders = []
        for cname in ("system_multi_turn", "tools_one_call"):
            conv = CONVERSATIONS[cname]
            renders.append(dict(conversation=cname, add_generation_prompt=True,
                                **_render(loaded, conv, True, spec.get("extra", {}))))
        out[name] = {"files": files, "renders": renders}
    return out


def main() -> None:
    import jinja2
    import transformers

    fixture = {"generated_by": "benchmarks/lm_chat_fixture.py", "transformers": transformers.__version__,
               "jinja2": jinja2.__version__, **render_all(), "folders": saved_folders()}
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    n_err = sum("error" in r for r in fixture["renders"])
    print(f"wrote {FIXTURE}: {len(fixture['renders'])} renders ({n_err} errors), "
          f"{len(fixture['folders'])} saved folders, {FIXTURE.stat().st_size} bytes")


if __name__ == "__main__":
    main()
