"""What a model folder says about talking to it: its `chat_template` and its `generation_config.json`.

`apply_chat_template` renders a HuggingFace Jinja2 chat template the way transformers'
`tokenizer.apply_chat_template(..., tokenize=False)` does, so a prompt built here tokenizes to the ids the
model was trained on: a sandboxed (immutable) Jinja2 environment with `trim_blocks` and `lstrip_blocks`, the
loop-controls extension (`break` / `continue`), a no-op `{% generation %}` block, the globals
`raise_exception`, `strftime_now`, `namespace` and `dict`, and a `tojson` filter that keeps non-ASCII text
(`ensure_ascii=False`) and takes `indent`, `separators` and `sort_keys`. The template sees `messages`, `tools`,
`documents`, `add_generation_prompt`, the tokenizer's special tokens (`bos_token`, `eos_token`, ...) and any
extra keyword (e.g. `enable_thinking`). As in transformers, keys of a message whose value is None are dropped,
a message's reasoning given as `reasoning_content`, `thinking` or `reasoning` is visible under the first two,
and every input is rebuilt from plain JSON types before the template sees it.

`ChatTemplate.from_tokenizer_config` reads the template(s) of a folder in both layouts (transformers 4:
`chat_template` inside `tokenizer_config.json`, a string or a list of {name, template}; transformers 5:
`chat_template.jinja` and `chat_templates/<name>.jinja` beside it, which take priority).

`GenerationDefaults.from_file` reads `generation_config.json` (EOS id lists, pad id, sampling defaults) and
turns it into a `core.lm.generate.SamplingConfig`.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_MIN_JINJA = (3, 1, 6)  # older releases have known sandbox escapes; templates from the Hub are untrusted code


# ----------------------------------------------------------------------------------------------------------------
# the Jinja2 environment


@functools.lru_cache(maxsize=1)
def _environment():
    """The sandboxed environment, built once (jinja2 is imported lazily: only chat rendering needs it)."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox
    import jinja2.utils

    version = tuple(int(p) for p in jinja2.__version__.split(".")[:3] if p.isdigit())
    if version < _MIN_JINJA:
        raise ValueError(f"jinja2 {jinja2.__version__}: expected >= 3.1.6 (older versions have sandbox escapes)")

    class GenerationBlock(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; rendering it is a
        no-op (the body is emitted in its own scope, as a call block)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Namespace(jinja2.utils.Namespace):
        """`namespace(...)` that refuses attribute names starting with `_` (no path to interpreter internals)."""

        def __init__(*args, **kwargs):  # first positional is self, as in jinja2's Namespace
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for key in attrs:
                Namespace.check(key)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, key, value):
            Namespace.check(key)
            jinja2.utils.Namespace.__setitem__(self, key, value)

        @staticmethod
        def check(key):
            if isinstance(key, str) and key.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {key!r}: names starting with '_' are "
                                                      "not allowed in chat templates")

    class DictFactory:
        """`dict(...)` and `dict.fromkeys(...)` without handing the template the `dict` type itself."""

        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, keys, value=None):
            return dict.fromkeys(keys, value)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, namespace=Namespace,
                       dict=DictFactory())
    return env


@functools.lru_cache(maxsize=64)
def _compile(source: str):
    return _environment().from_string(source)


# ----------------------------------------------------------------------------------------------------------------
# inputs as the template sees them


def _plain(value: Any) -> Any:
    """A copy of `value` made of JSON-like Python types only (str/int/float/bool/None, dict, list, tuple).

    Subclasses (enums, numpy scalars) lose their extra methods, dataclasses and pydantic-style objects become
    dicts, and anything else becomes the inert string `<TypeName>`: the sandbox cannot know which methods of
    an arbitrary object are safe, and templates only test such values for presence.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def _messages(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Plain copies of the messages: None-valued keys dropped, reasoning visible under both common names."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(f"messages {messages!r:.80}: expected a non-empty list of message dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            m = _plain(m)
            if not isinstance(m, Mapping):
                raise ValueError(f"message {i} {m!r:.80}: expected a dict with 'role' and 'content'")
        m = _plain({k: v for k, v in m.items() if v is not None})
        reasoning = next((m[k] for k in REASONING_KEYS if m.get(k) is not None), None)
        if reasoning is not None:  # `thinking` first (read by gpt-oss style templates), then the message's own keys
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def _tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict] | None:
    if tools is None:
        return None
    if isinstance(tools, Mapping) or not isinstance(tools, Sequence):
        raise ValueError(f"tools {tools!r:.80}: expected a list of JSON-schema dicts")
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping):
            raise ValueError(f"tool {i} {t!r:.80}: expected a JSON-schema dict (functions are not converted to "
                             "schemas here)")
    return _plain(list(tools))


# ----------------------------------------------------------------------------------------------------------------
# rendering


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _where(exc: BaseException, chat: list[dict]) -> str:
    """' (template line N, at message i, role r)' from the template frames of a rendering traceback."""
    line, message = None, None
    tb = exc.__traceback__
    while tb is not None:  # jinja2 rewrites tracebacks so template frames carry template line numbers and locals
        frame = tb.tb_frame
        if frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
            local = frame.f_locals  # the loop variable may be named anything: find a local that is a message
            found = [v for v in ([local.get("message")] + list(local.values())) if any(v is m for m in chat)]
            message = found[0] if found else message
        tb = tb.tb_next
    parts = [f"template line {line}"] if line is not None else []
    index = next((i for i, m in enumerate(chat) if m is message), None)
    if index is not None:
        parts.append(f"at message {index} (role {chat[index].get('role')!r})")
    return f" ({', '.join(parts)})" if parts else ""


def apply_chat_template(template: str, messages: Sequence[Mapping[str, Any]], *,
                        tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool = False,
                        bos_token: str | None = None, eos_token: str | None = None,
                        documents: Sequence[Mapping[str, Any]] | None = None, template_name: str = "chat_template",
                        **extra: Any) -> str:
    """Render a HF Jinja2 chat template over one conversation, as transformers' `apply_chat_template(
    tokenize=False)` does.

    messages: [{"role": "system"|"user"|"assistant"|"tool", "content": str, ...}]; an assistant message may carry
    OpenAI-style `tool_calls` ([{"type": "function", "function": {"name": str, "arguments": dict}}]), a tool
    message its `tool_call_id` / `name`. tools: JSON schemas ({"type": "function", "function": {"name",
    "description", "parameters"}}). bos_token / eos_token (and pad_token etc. through `extra`) are passed to the
    template only when given, as transformers passes only the tokenizer's tokens that are set.
    A template that does not compile or fails while rendering (`raise_exception`, an undefined value used, a
    type error) raises one ValueError line naming `template_name`, the template line, the message and why.
    """
    import jinja2

    chat = _messages(messages)
    schemas = _tools(tools)
    docs = None if documents is None else _plain(list(documents))
    specials = {k: v for k, v in (("bos_token", bos_token), ("eos_token", eos_token)) if v is not None}
    context = dict(messages=chat, tools=schemas, documents=docs, add_generation_prompt=bool(add_generation_prompt),
                   **_plain({**specials, **extra}))
    if not isinstance(template, str) or not template:
        raise ValueError(f"chat template {template_name}: expected a non-empty Jinja2 string, got {template!r:.60}")
    try:
        compiled = _compile(template)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"chat template {template_name}: Jinja2 syntax error at template line {e.lineno}: "
                         f"{_one_line(e.message)}") from None
    try:
        return compiled.render(**context)
    except jinja2.UndefinedError as e:
        reason = f"undefined value: {_one_line(e.message)}"
        err = e
    except jinja2.exceptions.SecurityError as e:
        reason = f"unsafe operation refused by the sandbox: {_one_line(e)}"
        err = e
    except jinja2.TemplateError as e:  # raise_exception(...) raises a bare TemplateError
        reason = f"the template raised: {_one_line(e.message)}"
        err = e
    except Exception as e:  # noqa: BLE001 - a template may fail in any Python operation it calls
        reason = f"{type(e).__name__}: {_one_line(e)}"
        err = e
    roles = [m.get("role") for m in chat]
    raise ValueError(f"chat template {template_name} failed to render{_where(err, chat)}: {reason} "
                     f"[{len(chat)} messages, roles {roles}]") from None


def _token_text(value: Any, where: str) -> str | None:
    """A special token as stored in tokenizer_config.json: a string, an AddedToken-like dict, or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"{where}: expected a token string or an AddedToken dict with 'content', got {value!r:.60}")


def _read_json(path: pathlib.Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{what} {str(path)!r}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {str(path)!r}: not valid JSON ({_one_line(e)})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {str(path)!r}: expected a JSON object, got {type(data).__name__}")
    return data


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChatTemplate:
    """The chat template(s) of a tokenizer and the special tokens they see.

    templates: ((name, Jinja2 source), ...); a folder with one template names it "default".
    special_tokens: ((bos_token, "<s>"), ...), the tokenizer's named special tokens that are set.
    source: where they came from (for error messages).
    """

    templates: tuple[tuple[str, str], ...]
    special_tokens: tuple[tuple[str, str], ...] = ()
    source: str = "chat_template"

    def __post_init__(self):
        if not self.templates or any(not isinstance(t, str) or not t for _, t in self.templates):
            raise ValueError(f"chat templates of {self.source}: expected at least one non-empty template string")
        object.__setattr__(self, "templates", tuple((str(n), t) for n, t in self.templates))
        object.__setattr__(self, "special_tokens", tuple((str(k), str(v)) for k, v in self.special_tokens))

    @classmethod
    def from_tokenizer_config(cls, path: str | pathlib.Path) -> ChatTemplate:
        """Read a `tokenizer_config.json` (or the folder holding it) and the `chat_template.jinja` /
        `chat_templates/*.jinja` files beside it, which take priority over the config's `chat_template`."""
        path = pathlib.Path(path)
        config_path = path / "tokenizer_config.json" if path.is_dir() else path
        folder = config_path.parent
        config = _read_json(config_path, "tokenizer config")
        templates: dict[str, str] = {}
        jinja_file, jinja_dir = folder / "chat_template.jinja", folder / "chat_templates"
        if jinja_file.is_file():
            templates["default"] = jinja_file.read_text(encoding="utf-8")
        if jinja_dir.is_dir():
            for f in sorted(jinja_dir.glob("*.jinja")):
                templates[f.name.removesuffix(".jinja")] = f.read_text(encoding="utf-8")
        if not templates:
            raw = config.get("chat_template")
            if isinstance(raw, str):
                templates["default"] = raw
            elif isinstance(raw, list) and all(isinstance(t, Mapping) and isinstance(t.get("name"), str)
                                               and isinstance(t.get("template"), str) for t in raw):
                templates = {t["name"]: t["template"] for t in raw}
            elif raw is None:
                raise ValueError(f"tokenizer config {str(config_path)!r}: no chat_template in it and no "
                                 "chat_template.jinja beside it")
            else:
                raise ValueError(f"tokenizer config {str(config_path)!r}: chat_template {raw!r:.60}: expected a "
                                 "string or a list of {name, template}")
        legacy = folder / "special_tokens_map.json"
        legacy_map = _read_json(legacy, "special tokens map") if legacy.is_file() else {}
        specials = []
        for key in SPECIAL_TOKEN_NAMES:
            value = config.get(key, legacy_map.get(key))
            text = _token_text(value, f"tokenizer config {str(config_path)!r}: {key}")
            if text is not None:
                specials.append((key, text))
        return cls(templates=tuple(templates.items()), special_tokens=tuple(specials), source=str(config_path))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.templates)

    def get(self, name: str | None = None, *, tools: Sequence[Mapping] | None = None) -> str:
        """The template source: the one named `name`; else a single template; else "tool_use" when tools are
        given and it exists; else "default" (transformers' choice)."""
        table = dict(self.templates)
        if name is not None:
            if name not in table:
                raise ValueError(f"chat template name {name!r}: expected one of {sorted(table)} ({self.source})")
            return table[name]
        if len(table) == 1:
            return next(iter(table.values()))
        if tools is not None and "tool_use" in table:
            return table["tool_use"]
        if "default" in table:
            return table["default"]
        raise ValueError(f"chat templates {sorted(table)} of {self.source}: no 'default'; pass name=")

    def render(self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping] | None = None,
               add_generation_prompt: bool = False, name: str | None = None, **extra: Any) -> str:
        """`apply_chat_template` with this tokenizer's template and special tokens (`extra` overrides them)."""
        source = self.get(name, tools=tools)
        chosen = name or next(n for n, t in self.templates if t == source)
        kwargs = {**dict(self.special_tokens), **extra}
        return apply_chat_template(source, messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                   template_name=f"{chosen!r} of {self.source}", **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# generation_config.json


def _opt_int(data: Mapping, key: str, where: str) -> int | None:
    v = data.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where}: {key}={v!r}: expected an integer token id or null")
    return v


def _num(data: Mapping, key: str, default, where: str, kind=float):
    v = data.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
        raise ValueError(f"{where}: {key}={v!r}: expected {'an integer' if kind is int else 'a number'}")
    return kind(v)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenerationDefaults:
    """The fields of a `generation_config.json` that decide decoding; unset fields take transformers'
    defaults (do_sample False, temperature 1, top_k 50, top_p 1, repetition_penalty 1).

    eos_token_id: every id that ends a turn (Llama-3 lists several); max_new_tokens None when the file has none.
    repetition_penalty is read so a caller can see it, but `core.lm.generate` does not implement it.
    """

    eos_token_id: tuple[int, ...] = ()
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    max_new_tokens: int | None = None
    repetition_penalty: float = 1.0
    source: str = "generation_config"

    @classmethod
    def from_file(cls, path: str | pathlib.Path) -> GenerationDefaults:
        """Read `generation_config.json` (a file, or the model folder holding one)."""
        path = pathlib.Path(path)
        if path.is_dir():
            path = path / "generation_config.json"
        data = _read_json(path, "generation config")
        where = f"generation config {str(path)!r}"
        eos = data.get("eos_token_id")
        if eos is None:
            eos = ()
        elif isinstance(eos, int) and not isinstance(eos, bool):
            eos = (eos,)
        elif isinstance(eos, list) and all(isinstance(e, int) and not isinstance(e, bool) for e in eos):
            eos = tuple(eos)
        else:
            raise ValueError(f"{where}: eos_token_id={eos!r}: expected an integer or a list of integers")
        do_sample = data.get("do_sample", False)
        if not isinstance(do_sample, bool):
            raise ValueError(f"{where}: do_sample={do_sample!r}: expected true or false")
        return cls(eos_token_id=eos, pad_token_id=_opt_int(data, "pad_token_id", where),
                   bos_token_id=_opt_int(data, "bos_token_id", where), do_sample=do_sample,
                   temperature=_num(data, "temperature", 1.0, where), top_k=_num(data, "top_k", 50, where, int),
                   top_p=_num(data, "top_p", 1.0, where),
                   max_new_tokens=_num(data, "max_new_tokens", None, where, int),
                   repetition_penalty=_num(data, "repetition_penalty", 1.0, where), source=str(path))

    def sampling(self, *, ignore_repetition_penalty: bool = False, **overrides: Any):
        """A `core.lm.generate.SamplingConfig` from these defaults; `overrides` set its fields directly.

        stop_tokens = the EOS ids; pad_id = pad_token_id, else the first EOS id, else 0; greedy (temperature 0,
        top_k 0, top_p 1) when do_sample is false, as transformers ignores the sampling fields then. A
        repetition_penalty other than 1 is not supported and raises unless `ignore_repetition_penalty`.
        """
        from core.lm.generate import SamplingConfig

        if self.repetition_penalty != 1.0 and not ignore_repetition_penalty:
            raise ValueError(f"{self.source}: repetition_penalty={self.repetition_penalty}: not supported by "
                             "core.lm.generate (expected 1.0); pass ignore_repetition_penalty=True to sample "
                             "without it")
        names = {f.name for f in dataclasses.fields(SamplingConfig)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"sampling overrides {unknown}: expected fields of SamplingConfig {sorted(names)}")
        pad = self.pad_token_id if self.pad_token_id is not None else (self.eos_token_id[0] if self.eos_token_id
                                                                       else 0)
        fields: dict[str, Any] = dict(stop_tokens=self.eos_token_id, pad_id=pad)
        if self.do_sample:
            fields.update(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)
        else:
            fields.update(temperature=0.0, top_k=0, top_p=1.0)
        if self.max_new_tokens is not None:
            fields["max_new_tokens"] = self.max_new_tokens
        fields.update(overrides)
        return SamplingConfig(**fields)
