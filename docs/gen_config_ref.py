#!/usr/bin/env python3
"""Generate docs/config-reference.md from config.proto's own comments.

Input: a FileDescriptorSet written by `protoc --include_source_info
--descriptor_set_out=...` (protoc-c takes the same options); output:
Markdown, one section per message in file order, a table of its keys, and
the values of every enum. Run by make (docs/local.mk), so the reference is
rebuilt whenever config.proto changes and cannot drift from it.

Usage: gen_config_ref.py DESCRIPTOR_SET PROTO_NAME OUT.md
"""

import os
import sys

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64", F.TYPE_UINT64: "uint64",
    F.TYPE_INT32: "int32", F.TYPE_FIXED64: "fixed64", F.TYPE_FIXED32: "fixed32", F.TYPE_BOOL: "bool",
    F.TYPE_STRING: "string", F.TYPE_BYTES: "bytes", F.TYPE_UINT32: "uint32", F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64", F.TYPE_SINT32: "sint32", F.TYPE_SINT64: "sint64",
}
WELL_KNOWN = {
    ".google.protobuf.Duration": 'duration ("1.5s", "250ms", "2m")',
    ".google.protobuf.DoubleValue": "double",
    ".google.protobuf.UInt32Value": "uint32",
    ".google.protobuf.BoolValue": "bool",
    ".google.protobuf.StringValue": "string",
}


def comments(locs, path):
    loc = locs.get(tuple(path))
    if not loc:
        return ""
    parts = [loc.leading_comments, loc.trailing_comments]
    text = " ".join(" ".join(ln.strip() for ln in p.strip().splitlines()) for p in parts if p.strip())
    return text.replace("|", "\\|")


def anchor(name):
    return name.lower().replace(".", "")


# A map<K, V> field is a repeated field of a nested "...Entry" message
# (options.map_entry): written as a mapping, so shown as one, with no link
# (the entry has no section). Filled by main(): type name -> (key, value).
MAP_ENTRIES = {}


def type_of(f, package):
    if f.type == F.TYPE_MESSAGE and f.type_name in MAP_ENTRIES:
        k, v = MAP_ENTRIES[f.type_name]
        return "map of %s to %s" % (type_of(k, package), type_of(v, package))
    if f.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        if f.type_name in WELL_KNOWN:
            t = WELL_KNOWN[f.type_name]
        else:
            short = f.type_name[len(package) + 2:] if f.type_name.startswith("." + package + ".") \
                else f.type_name.lstrip(".")
            t = "[%s](#%s)" % (short, anchor(short))
            if f.type == F.TYPE_ENUM:
                t = "enum " + t
    else:
        t = SCALARS.get(f.type, "?")
    if f.label == F.LABEL_REPEATED:
        t = "list of " + t
    return t


def enum_section(out, locs, path, e, qual):
    out.append("### %s\n" % qual)
    doc = comments(locs, path)
    if doc:
        out.append(doc + "\n")
    out.append("| value | number | meaning |\n| --- | --- | --- |")
    for vi, v in enumerate(e.value):
        out.append("| `%s` | %d | %s |" % (v.name, v.number, comments(locs, path + [2, vi])))
    out.append("")


def main():
    ds_path, proto_name, out_path = sys.argv[1:4]
    fds = descriptor_pb2.FileDescriptorSet()
    with open(ds_path, "rb") as f:
        fds.ParseFromString(f.read())
    fd = next(x for x in fds.file if x.name == proto_name)
    locs = {tuple(loc.path): loc for loc in fd.source_code_info.location}
    for m in fd.message_type:
        for n in m.nested_type:
            if n.options.map_entry:
                MAP_ENTRIES[".%s.%s.%s" % (fd.package, m.name, n.name)] = (n.field[0], n.field[1])
    if not locs:
        sys.exit("gen_config_ref.py: %s has no source info (run protoc with --include_source_info)" % ds_path)
    out = ["<!-- Generated from %s by docs/gen_config_ref.py at build time; do not edit. -->" % proto_name,
           "# Configuration reference", "",
           "Every key maitred accepts, generated from the comments of `protos/%s`, the "
           "schema maitred loads its config with. YAML and JSON follow the proto3 JSON mapping: "
           "keys as written here (or lowerCamel), enums by name, durations as \"1.5s\". "
           "Validate a file with `maitred --check-config FILE`." % proto_name, ""]
    header = comments(locs, [12]) or ""
    if header:
        out += [header, ""]
    out.append("Messages: " + ", ".join("[%s](#%s)" % (m.name, anchor(m.name)) for m in fd.message_type) + "\n")
    for mi, m in enumerate(fd.message_type):
        path = [4, mi]
        out.append("## %s\n" % m.name)
        doc = comments(locs, path)
        if doc:
            out.append(doc + "\n")
        if m.field:
            out.append("| key | type | field | description |\n| --- | --- | --- | --- |")
            for fi, f in enumerate(m.field):
                out.append("| `%s` | %s | %d | %s |" % (f.name, type_of(f, fd.package), f.number,
                                                       comments(locs, path + [2, fi])))
            out.append("")
        for ei, e in enumerate(m.enum_type):
            enum_section(out, locs, path + [4, ei], e, "%s.%s" % (m.name, e.name))
    for ei, e in enumerate(fd.enum_type):
        enum_section(out, locs, [5, ei], e, e.name)
    with open(out_path + ".tmp", "w") as f:
        f.write("\n".join(out).rstrip() + "\n")
    os.replace(out_path + ".tmp", out_path)


if __name__ == "__main__":
    main()
