#!/usr/bin/env python3
"""Print the table of llama.cpp's LLAMA_ARG_* environment variables for
crates/vram/src/commands/llama_env.rs from a llama.cpp checkout's common/arg.cpp:
each option's `.set_env("NAME")`, its long flag, and whether it takes a value, is a switch,
or a boolean with a negative form.

    python3 scripts/llama_env_table.py path/to/llama.cpp/common/arg.cpp
"""
import re
import sys

text = open(sys.argv[1]).read()
seen = set()
for m in re.finditer(r'add_opt\(common_arg\(\s*\{([^}]*)\}\s*,\s*(\{([^}]*)\}\s*,)?', text):
    end = text.find("add_opt(common_arg(", m.end())
    block = text[m.start(): end if end > 0 else len(text)]
    env = re.findall(r'set_env\("([A-Z0-9_]+)"\)', block)
    if not env or not env[0].startswith("LLAMA_") or env[0] in seen:
        continue
    seen.add(env[0])
    names = [x.strip().strip('"') for x in m.group(1).split(",")]
    neg = [x.strip().strip('"') for x in m.group(3).split(",")] if m.group(3) else []
    flag = next((n for n in names if n.startswith("--")), names[0])
    handler = re.search(r"\[\]\(common_params & params(, [^)]*)?\)", block)
    signature = handler.group(1) if handler else None
    if neg or (signature and "bool" in signature):
        negative = next((n for n in neg if n.startswith("--")), "")
        kind = f'EnvArg::Bool("{negative}")'
    elif signature is None:
        kind = "EnvArg::Switch"
    else:
        kind = "EnvArg::Value"
    print(f'    ("{env[0]}", "{flag}", {kind}),')
