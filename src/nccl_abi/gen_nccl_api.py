#!/usr/bin/env python3
"""Writes the table of NCCL's API (nccl_api.inc) from NCCL's headers as the compiler sees them.

    gen_nccl_api.py PREPROCESSED_HEADER OUTPUT [--source PATH]

PREPROCESSED_HEADER is the wrapper header src/nccl_abi/CMakeLists.txt writes (nccl_headers.h:
nccl.h, then nccl_device.h where it lies beside it, after DEVICE_API_MARKER) run through the C++
preprocessor with the flags libyali-nccl is compiled with, so the table holds exactly the functions
the library's own translation units see declared: #if branches are already decided and comments
gone. The headers' inline functions (nccl_device.h's device code and C++ overloads) are skipped.

The output is one X-macro row per function, which forwards.cc turns into a forward to the real NCCL
and nccl_api.h into the enum of functions:

    YALI_NCCL_FUNCTION(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count), (comm, count))
    YALI_NCCL_PROFILING_ALIAS(const char*, ncclGetErrorString, (ncclResult_t result), (result))
                                    where the header also declares pncclGetErrorString
    YALI_NCCL_DEVICE_PROFILING_ALIAS(...)     a device-API function (after DEVICE_API_MARKER,
                                              nccl_device.h), whose pncclX no header declares
    #define YALI_NCCL_HAS_ncclCommCount 1         so that code can test for functions of newer NCCLs

Parameter lists are copied from the header; a parameter without a name gets one (argN). Anything
this parser does not understand stops the build with a message rather than guess: the compiler
then checks every row against the header anyway (the library defines the functions with nccl.h
included), so a wrong row cannot build.
"""

import argparse
import re
import sys

_NAME = re.compile(r"\b(p?nccl[A-Za-z0-9_]*)\s*\(")
# What may stand before a declared name: its return type (nccl.h returns ncclResult_t, const char*
# and void), possibly after attributes, which are removed first.
_RETURN_TYPE = re.compile(r"^(const\s+)?[A-Za-z_][A-Za-z0-9_]*(\s*\*)*(\s*const)?(\s*\*)*$")
_KEYWORDS = {"return", "if", "while", "for", "switch", "sizeof", "case", "else", "do", "typedef"}
# Type words that can end a parameter with no name ("int", "ncclComm_t", "size_t").
_TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
               "bool", "const", "volatile", "struct", "enum"}


class ParseError(Exception):
    pass


def _matching_paren(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ParseError("unbalanced parentheses after offset %d" % open_at)


def _strip_attributes(text):
    """Removes __attribute__((...)) and extern "C" from a return-type region."""
    out = text
    while True:
        m = re.search(r"__attribute__\s*\(", out)
        if not m:
            break
        end = _matching_paren(out, m.end() - 1)
        out = out[: m.start()] + " " + out[end + 1:]
    out = re.sub(r'extern\s*"C"', " ", out)
    return " ".join(out.split())


def _split_params(params):
    parts, depth, cur = [], 0, ""
    for ch in params:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur += ch
    parts.append(cur)
    return [" ".join(p.split()) for p in parts]


def _is_type_word(word):
    return word in _TYPE_WORDS or word.endswith("_t")


def _param_name(param, index):
    """(declaration, name) of one parameter; a name is invented when the header gives none."""
    fn_ptr = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", param)
    if fn_ptr:
        return param, fn_ptr.group(1)
    if param.endswith("*"):  # "ncclDevCommRequirements_t const*": no name
        name = "arg%d" % index
        return "%s %s" % (param, name), name
    m = re.search(r"([A-Za-z_]\w*)\s*((\[[^\]]*\]\s*)*)$", param)
    if not m:
        raise ParseError("cannot read parameter %r" % param)
    word, type_part = m.group(1), param[: m.start()].strip()
    if type_part and type_part not in ("const", "volatile") and not _is_type_word(word):
        return param, word
    if not _is_type_word(word) and not type_part.endswith("*"):
        raise ParseError("cannot tell the name of parameter %r" % param)
    name = "arg%d" % index
    return "%s %s" % (param, name), name


# The line src/nccl_abi/CMakeLists.txt puts before nccl_device.h in the headers it preprocesses.
DEVICE_API_MARKER = "struct yali_nccl_device_api_follows;"


def parse(text):
    """[(return type, name, [parameter declarations], [parameter names], offset)] in header order."""
    functions, seen = [], set()
    for m in _NAME.finditer(text):
        name = m.group(1)
        open_at = m.end() - 1
        close_at = _matching_paren(text, open_at)
        after = text[close_at + 1:].lstrip()
        if not after.startswith(";"):
            continue  # a call inside a macro's expansion or an inline body, not a declaration
        start = max(text.rfind(c, 0, m.start()) for c in ";{}") + 1
        ret = _strip_attributes(text[start: m.start()])
        if not ret or ret.split()[0] in _KEYWORDS:
            continue
        if {"inline", "static", "constexpr"} & set(ret.split()):
            continue  # defined in the header (nccl_device.h's inline overloads): no symbol to export
        if not _RETURN_TYPE.match(ret):
            raise ParseError("%s: unexpected return type %r" % (name, ret))
        params = text[open_at + 1: close_at].strip()
        decls, names = [], []
        if params not in ("", "void"):
            for i, p in enumerate(_split_params(params)):
                decl, pname = _param_name(p, i)
                decls.append(decl)
                names.append(pname)
        if name in seen:
            continue  # declared twice (allowed in C); the first declaration is the one
        seen.add(name)
        functions.append((ret, name, decls, names, m.start()))
    return functions


def render(functions, source, device_from=None):
    """The table. `device_from`: the offset where nccl_device.h's declarations begin (None: no
    device header), whose functions get a profiling alias of their own (no pncclX is declared)."""
    by_name = {f[1]: f[:4] for f in functions}
    device = {f[1] for f in functions if device_from is not None and f[4] > device_from}
    functions = [f[:4] for f in functions]
    rows = [f for f in functions if not f[1].startswith("pnccl")]
    for f in functions:
        if f[1].startswith("pnccl") and f[1][1:] not in by_name:
            raise ParseError("%s has no %s to alias" % (f[1], f[1][1:]))
    if not rows:
        raise ParseError("no nccl* function found: is this nccl.h?")
    out = [
        "// Generated by src/nccl_abi/gen_nccl_api.py from %s. Do not edit: rebuild." % source,
        "// One row per function the headers declare (see forwards.cc and nccl_api.h).",
        "",
        "#ifdef YALI_NCCL_FUNCTION",
    ]
    for ret, name, decls, names in rows:
        out.append("YALI_NCCL_FUNCTION(%s, %s, (%s), (%s))" % (ret, name, ", ".join(decls),
                                                                ", ".join(names)))
    out += ["#endif", "", "#ifdef YALI_NCCL_PROFILING_ALIAS"]
    for _, name, _, _ in rows:
        if "p" + name in by_name:
            # The alias's own declaration: forwards.cc checks that its type is the function's.
            ret, _, decls, names = by_name["p" + name]
            out.append("YALI_NCCL_PROFILING_ALIAS(%s, %s, (%s), (%s))" % (ret, name, ", ".join(decls),
                                                                          ", ".join(names)))
    out += ["#endif", "", "#ifdef YALI_NCCL_DEVICE_PROFILING_ALIAS"]
    for ret, name, decls, names in rows:
        # libnccl exports pncclX for these too (its NCCL_API macro), which nccl_device.h does not
        # declare.
        if name in device and "p" + name not in by_name:
            out.append("YALI_NCCL_DEVICE_PROFILING_ALIAS(%s, %s, (%s), (%s))" % (ret, name, ", ".join(decls),
                                                                                 ", ".join(names)))
    out += ["#endif", "", "#ifndef YALI_NCCL_API_HAS_DEFINED", "#define YALI_NCCL_API_HAS_DEFINED"]
    for _, name, _, _ in rows:
        out.append("#define YALI_NCCL_HAS_%s 1" % name)
    out += ["#endif", ""]
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preprocessed")
    ap.add_argument("output")
    ap.add_argument("--source", default=None, help="the header's path, for the comment")
    args = ap.parse_args(argv)
    with open(args.preprocessed) as f:
        text = f.read()
    try:
        functions = parse(text)
        marker = text.find(DEVICE_API_MARKER)
        rendered = render(functions, args.source or args.preprocessed, marker if marker >= 0 else None)
    except ParseError as e:
        sys.stderr.write("gen_nccl_api.py: %s\n" % e)
        return 1
    try:
        with open(args.output) as f:
            if f.read() == rendered:
                return 0  # unchanged: keep the timestamp, nothing recompiles
    except OSError:
        pass
    with open(args.output, "w") as f:
        f.write(rendered)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
