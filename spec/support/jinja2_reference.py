"""Renders chat templates as Hugging Face transformers does (its
`chat_template_utils._compile_jinja_template` and `render_jinja_template`), the
reference that elelem's renderer is compared with.

Reads a JSON request on stdin:
  {"templates": {name: source}, "conversations": {name: {"messages": [...],
   "add_generation_prompt": bool, "variables": {...}}}, "bos_token": str,
   "eos_token": str, "now": unix seconds}
and writes {template: {"reads": [variable, ...] | null, "conversations": {conversation:
{"text": str} | {"error": str}}}} on stdout: "reads" is what jinja2.meta finds the
template looks up (null where jinja2 cannot parse it).

The environment is transformers': an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, a `{% generation %}`
block that renders its body unchanged, a `tojson` without HTML escaping that
takes json.dumps' ensure_ascii, indent, separators and sort_keys, and the globals
`raise_exception` and `strftime_now`. Only "now" is pinned, so that both
renderers format the same time.

transformers hands a content given as a list of text parts to the template as
it is; a template that takes only strings then prints the list. elelem joins
the texts for such a template, as llama.cpp does; so does this script, deciding
by jinja2's own rendering of a probe.
"""

import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers wraps the body in a
    call block that, outside of assistant-mask tracking, returns it as rendered."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


PROBE = "content-part-probe"


def takes_parts(template, render):
    """Whether the template shows a content given as a list of text parts, rather
    than printing the list (Python's repr of it) or failing."""
    try:
        text = render([{"role": "user", "content": [{"type": "text", "text": PROBE}]}])
    except Exception:
        return False
    return PROBE in text and "'text'" not in text


def joined(messages):
    """Lists of text parts as one string, the texts joined by newlines: what
    llama.cpp, and elelem, give a template that takes only strings."""
    return [
        {**m, "content": "\n".join(p["text"] for p in m["content"])} if isinstance(m.get("content"), list) else m
        for m in messages
    ]


def render(env, source, conversation, bos_token, eos_token):
    try:
        template = env.from_string(source)
        variables = {"bos_token": bos_token, "eos_token": eos_token, **conversation.get("variables", {})}
        tools = variables.pop("tools", None)
        documents = variables.pop("documents", None)

        def render_messages(messages):
            return template.render(
                messages=messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=conversation["add_generation_prompt"],
                **variables,
            )

        messages = conversation["messages"]
        if any(isinstance(m.get("content"), list) for m in messages) and not takes_parts(template, render_messages):
            messages = joined(messages)
        return {"text": render_messages(messages)}
    except Exception as e:  # every failure is a result: elelem must fail too
        return {"error": f"{type(e).__name__}: {e}"}


def reads(env, source):
    """The variables the template looks up, as jinja2.meta finds them."""
    try:
        return sorted(jinja2.meta.find_undeclared_variables(env.parse(source)))
    except Exception:
        return None


def main():
    request = json.load(sys.stdin)
    env = environment(datetime.fromtimestamp(request["now"]))
    results = {
        name: {
            "reads": reads(env, source),
            "conversations": {
                conv_name: render(env, source, conv, request["bos_token"], request["eos_token"])
                for conv_name, conv in request["conversations"].items()
            },
        }
        for name, source in request["templates"].items()
    }
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
