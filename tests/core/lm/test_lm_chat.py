"""Chat templates against transformers, and generation_config.json defaults.

The reference strings live in tests/core/lm/fixtures/chat_templates.json (made by benchmarks/lm_chat_fixture.py
with transformers' own `tokenizer.apply_chat_template(tokenize=False)`); a live variant re-renders with
transformers when it is importable.
"""

import datetime
import json
import pathlib

import pytest

from core.lm.chat import CHATML_TEMPLATE, ChatTemplate, GenerationDefaults, apply_chat_template
from core.lm.generate import SamplingConfig
from core.lm.tokenizer import chat_format

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "chat_templates.json").read_text("utf-8"))
RENDERS = FIXTURE["renders"]
IDS = [f"{r['template']}-{r['conversation']}-{'gen' if r['add_generation_prompt'] else 'nogen'}" for r in RENDERS]


def _ours(template: str, conversation: str, add_generation_prompt: bool) -> str:
    spec, conv = FIXTURE["templates"][template], FIXTURE["conversations"][conversation]
    return apply_chat_template(spec["template"], conv["messages"], tools=conv.get("tools"),
                               add_generation_prompt=add_generation_prompt, template_name=template,
                               **spec["special_tokens"], **spec.get("extra", {}))


def test_fixture_covers_the_features_real_templates_use():
    sources = "".join(t["template"] for t in FIXTURE["templates"].values())
    for feature in ("raise_exception", "namespace(", "loop.last", "loop.previtem", "loop.nextitem", "tojson(indent",
                    "tool_calls", "bos_token", "eos_token", "{%- break %}", "{% continue %}", "generation %}",
                    "reasoning_content", "is string", "| trim", "dict("):
        assert feature in sources, feature
    kinds = {(r["conversation"], r["add_generation_prompt"], "error" in r) for r in RENDERS}
    assert {("tools_one_call", g, False) for g in (False, True)} <= kinds
    assert ("bad_role", False, True) in kinds and ("single_user", True, False) in kinds
    texts = [r["text"] for r in RENDERS if "text" in r]
    assert any("<tool_call>" in t for t in texts) and any("<tool_response>" in t for t in texts)
    assert any("Zürich" in t for t in texts)
    thinking = next(r["text"] for r in RENDERS if (r["template"], r["conversation"]) == ("namespace_loop", "reasoning"))
    assert "<think>No divisor up to 9 divides 97.</think>" in thinking and "91 = 7 * 13." not in thinking


@pytest.mark.parametrize("render", RENDERS, ids=IDS)
def test_rendering_matches_transformers_fixture(render):
    args = render["template"], render["conversation"], render["add_generation_prompt"]
    if "text" in render:
        assert _ours(*args) == render["text"]
    else:  # transformers raised: we raise one ValueError line carrying the template's own reason
        with pytest.raises(ValueError) as info:
            _ours(*args)
        message = str(info.value)
        assert "\n" not in message and render["template"] in message
        assert render["error"].split(": ", 1)[1] in message


@pytest.mark.parametrize("layout", sorted(FIXTURE["folders"]))
def test_folders_saved_by_transformers_load_and_render_the_same(layout, tmp_path):
    folder = FIXTURE["folders"][layout]
    for name, text in folder["files"].items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    chat = ChatTemplate.from_tokenizer_config(tmp_path)
    if layout == "jinja_file":
        assert "chat_template.jinja" in folder["files"]
        assert "chat_template" not in json.loads(folder["files"]["tokenizer_config.json"])
        assert chat.names == ("default",)
    else:
        assert isinstance(json.loads(folder["files"]["tokenizer_config.json"])["chat_template"], list)
        assert set(chat.names) == {"default", "tool_use"}
    for render in folder["renders"]:
        conv = FIXTURE["conversations"][render["conversation"]]
        extra = {"date_string": "26 Jul 2024"} if layout == "config_list" else {}
        if "text" in render:
            assert chat.render(conv["messages"], tools=conv.get("tools"),
                               add_generation_prompt=render["add_generation_prompt"], **extra) == render["text"]
        else:
            with pytest.raises(ValueError, match="failed to render"):
                chat.render(conv["messages"], tools=conv.get("tools"), add_generation_prompt=True, **extra)


def test_rendering_matches_transformers_live(tmp_path):
    pytest.importorskip("transformers")
    from benchmarks import lm_chat_fixture as fx

    for render in fx.render_all()["renders"]:
        args = render["template"], render["conversation"], render["add_generation_prompt"]
        if "text" in render:
            assert _ours(*args) == render["text"], args
        else:
            with pytest.raises(ValueError):
                _ours(*args)
    for layout, folder in fx.saved_folders().items():
        root = tmp_path / layout
        for name, text in folder["files"].items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text, encoding="utf-8")
        chat = ChatTemplate.from_tokenizer_config(root / "tokenizer_config.json")
        for render in folder["renders"]:
            conv = fx.CONVERSATIONS[render["conversation"]]
            extra = fx.TEMPLATES["llama3_headers"]["extra"] if layout == "config_list" else {}
            assert chat.render(conv["messages"], tools=conv.get("tools"), add_generation_prompt=True,
                               **extra) == render["text"], layout


def test_chat_format_is_chatml_through_the_renderer():
    msgs = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    expected = "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n" \
               "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>assistant\n"
    assert chat_format(msgs, system="Be terse.") == expected
    assert apply_chat_template(CHATML_TEMPLATE, [{"role": "system", "content": "Be terse."}, *msgs],
                               add_generation_prompt=False) == expected.removesuffix("<|im_start|>assistant\n")
    assert chat_format([], add_generation_prompt=True) == "<|im_start|>assistant\n"


def test_environment_features():
    one = [{"role": "user", "content": "héllo", "name": None}]
    assert apply_chat_template("{{ strftime_now('%Y-%m-%d') }}", one) == datetime.datetime.now().strftime("%Y-%m-%d")
    # tojson keeps non-ASCII text and takes indent; None-valued keys are dropped as transformers does
    assert apply_chat_template("{{ messages[0] | tojson(indent=1) }}", one) == \
        '{\n "role": "user",\n "content": "héllo"\n}'
    assert apply_chat_template("{{ bos_token is defined }}|{{ eos_token }}|{{ pad_token }}", one, eos_token="</s>",
                               pad_token="<pad>") == "False|</s>|<pad>"
    assert apply_chat_template("{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}", one) == \
        "TrueTrueFalse"
    # reasoning given as `reasoning` is visible as reasoning_content and thinking
    assert apply_chat_template("{{ messages[0].reasoning_content }}/{{ messages[0].thinking }}",
                               [{"role": "assistant", "content": "x", "reasoning": "r"}]) == "r/r"
    # trim_blocks + lstrip_blocks: the block lines leave no whitespace behind
    assert apply_chat_template("  {% for m in messages %}\n{{ m.role }}\n  {% endfor %}\n", one * 2) == \
        "user\nuser\n"


@pytest.mark.parametrize("template, messages, expected", [
    ("{% for m in messages %}\n{{ m.content }\n{% endfor %}", None, "Jinja2 syntax error at template line 2"),
    ("{% for m in messages %}{% if m.role == 'bot' %}{{ raise_exception('no bots') }}{% endif %}{% endfor %}",
     [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}],
     "failed to render (template line 1, at message 1 (role 'bot')): the template raised: no bots"),
    ("{{ messages[0].tool_calls[0].name }}", None, "undefined value: 'dict object' has no attribute 'tool_calls'"),
    ("{% set ns = namespace(__class__=1) %}", None, "unsafe operation refused by the sandbox"),
    ("{{ messages.__class__.__subclasses__() }}", None, "unsafe operation refused by the sandbox"),
    ("{{ messages[0].content + 1 }}", None, "TypeError: can only concatenate str"),
])
def test_failures_are_one_value_error_line(template, messages, expected):
    with pytest.raises(ValueError) as info:
        apply_chat_template(template, messages or [{"role": "user", "content": "hi"}], template_name="mine.jinja")
    assert "\n" not in str(info.value) and "chat template mine.jinja" in str(info.value)
    assert expected in str(info.value)


@pytest.mark.parametrize("kwargs, expected", [
    (dict(messages=[]), "expected a non-empty list of message dicts"),
    (dict(messages=["hi"]), "message 0 'hi': expected a dict"),
    (dict(messages=[{"role": "user", "content": "x"}], tools=[len]), "tool 0"),
    (dict(messages=[{"role": "user", "content": "x"}], tools={"a": 1}), "expected a list of JSON-schema dicts"),
])
def test_bad_inputs(kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        apply_chat_template(CHATML_TEMPLATE, **kwargs)


def test_tokenizer_config_layouts(tmp_path):
    config = {"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False}, "eos_token": "</s>",
              "pad_token": None, "chat_template": [{"name": "default", "template": "D{{ bos_token }}"},
                                                   {"name": "tool_use", "template": "T{{ tools | length }}"},
                                                   {"name": "rag", "template": "R{{ unk_token }}"}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"unk_token": {"content": "<unk>"},
                                                                  "eos_token": "<ignored>"}))
    chat = ChatTemplate.from_tokenizer_config(tmp_path)
    msgs = [{"role": "user", "content": "x"}]
    assert dict(chat.special_tokens) == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    assert chat.render(msgs) == "D<s>" and chat.render(msgs, tools=[{"a": 1}]) == "T1"
    assert chat.render(msgs, name="rag") == "R<unk>" and chat.render(msgs, bos_token="B") == "DB"
    with pytest.raises(ValueError, match="chat template name 'chat': expected one of"):
        chat.render(msgs, name="chat")
    # a chat_template.jinja beside the config takes priority (transformers 5 layout)
    (tmp_path / "chat_template.jinja").write_text("J{{ eos_token }}")
    assert ChatTemplate.from_tokenizer_config(tmp_path / "tokenizer_config.json").render(msgs) == "J</s>"
    # failures name the file
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('nope') }}")
    with pytest.raises(ValueError, match=r"'default' of .*tokenizer_config.json failed to render.*nope"):
        ChatTemplate.from_tokenizer_config(tmp_path).render(msgs)
    for bad, expected in [("{", "not valid JSON"), ('{"eos_token": "x"}', "no chat_template in it"),
                          ('{"chat_template": 3}', "expected a string or a list of {name, template}"),
                          ('{"chat_template": "x", "bos_token": 5}', "bos_token: expected a token string")]:
        other = tmp_path / "other"
        other.mkdir(exist_ok=True)
        (other / "tokenizer_config.json").write_text(bad)
        with pytest.raises(ValueError, match=expected):
            ChatTemplate.from_tokenizer_config(other)
    with pytest.raises(ValueError, match="file not found"):
        ChatTemplate.from_tokenizer_config(tmp_path / "missing")


def _gen_config(tmp_path, data) -> pathlib.Path:
    path = tmp_path / "generation_config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_generation_config_llama3_style(tmp_path):
    path = _gen_config(tmp_path, {"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128008, 128009],
                                  "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.45.0"})
    d = GenerationDefaults.from_file(tmp_path)
    assert d == GenerationDefaults(eos_token_id=(128001, 128008, 128009), bos_token_id=128000, do_sample=True,
                                   temperature=0.6, top_p=0.9, source=str(path))
    assert d.sampling() == SamplingConfig(temperature=0.6, top_k=50, top_p=0.9,
                                          stop_tokens=(128001, 128008, 128009), pad_id=128001)
    assert d.sampling(max_new_tokens=7, top_k=0).max_new_tokens == 7
    with pytest.raises(ValueError, match=r"sampling overrides \['beam'\]"):
        d.sampling(beam=4)


def test_generation_config_greedy_and_repetition_penalty(tmp_path):
    _gen_config(tmp_path, {"eos_token_id": 2, "pad_token_id": 0, "do_sample": False, "temperature": 0.7,
                           "top_k": 20, "max_new_tokens": 64, "repetition_penalty": 1.05})
    d = GenerationDefaults.from_file(tmp_path / "generation_config.json")
    assert (d.eos_token_id, d.pad_token_id, d.repetition_penalty) == ((2,), 0, 1.05)
    with pytest.raises(ValueError, match=r"repetition_penalty=1.05: not supported"):
        d.sampling()
    assert d.sampling(ignore_repetition_penalty=True) == SamplingConfig(max_new_tokens=64, temperature=0.0, top_k=0,
                                                                        top_p=1.0, stop_tokens=(2,), pad_id=0)


@pytest.mark.parametrize("data, expected", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"eos_token_id": "2"}, "eos_token_id='2': expected an integer or a list of integers"),
    ({"eos_token_id": [1, True]}, "expected an integer or a list of integers"),
    ({"do_sample": "yes"}, "do_sample='yes'"),
    ({"top_k": 2.5}, "top_k=2.5: expected an integer"),
    ({"pad_token_id": "0"}, "pad_token_id='0'"),
])
def test_generation_config_malformed(tmp_path, data, expected):
    path = _gen_config(tmp_path, data)
    with pytest.raises(ValueError, match=expected) as info:
        GenerationDefaults.from_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_generation_config_missing(tmp_path):
    with pytest.raises(ValueError, match=r"generation_config.json': file not found"):
        GenerationDefaults.from_file(tmp_path)
    assert GenerationDefaults.from_file(_gen_config(tmp_path, "{}")).sampling() == SamplingConfig()
