"""Compile protos/maitred/testing/v1/echo.proto (and OTLP's trace protos,
for the tests' OTLP receiver) at run time and import them.

The generated code goes to $MAITRED_TEST_GEN when set (run.sh compiles once
per run), else to a fresh temporary directory removed at exit. Generated code
is never committed.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def srcdir():
    return os.environ.get("MAITRED_SRCDIR") or os.path.dirname(os.path.dirname(HERE))


def compile_into(outdir):
    """Run grpc_tools.protoc on echo.proto into outdir; raise on failure."""
    protos = os.path.join(srcdir(), "protos")
    os.makedirs(outdir, exist_ok=True)
    cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I", protos,
           "--python_out=" + outdir, "--grpc_python_out=" + outdir,
           os.path.join(protos, "maitred", "testing", "v1", "echo.proto")]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=120)
    if res.returncode != 0:
        raise RuntimeError("protoc failed: %s\n%s" % (" ".join(cmd), res.stdout.decode(errors="replace")))
    otlp = ["opentelemetry/proto/" + p for p in OTLP_PROTOS]
    cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I", protos, "--python_out=" + outdir] + \
        [os.path.join(protos, p) for p in otlp]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if res.returncode != 0:
        raise RuntimeError("protoc failed: %s\n%s" % (" ".join(cmd), res.stdout.decode(errors="replace")))
    # Make the output importable as maitred.testing.v1.echo_pb2 and
    # opentelemetry.proto.collector.trace.v1.trace_service_pb2.
    dirs = ["maitred", "maitred/testing", "maitred/testing/v1", "opentelemetry", "opentelemetry/proto"]
    dirs += ["opentelemetry/proto/" + os.path.dirname(p) for p in OTLP_PROTOS]
    dirs += ["opentelemetry/proto/collector"]
    for d in dirs:
        open(os.path.join(outdir, d, "__init__.py"), "a").close()
    compile_orca(outdir)


ORCA_PROTO = "xds/data/orca/v3/orca_load_report.proto"


def compile_orca(outdir):
    """protos/xds/.../orca_load_report.proto into outdir/orca (its own
    directory: a package called xds on sys.path would hide the tests'
    xds.py)."""
    protos = os.path.join(srcdir(), "protos")
    out = os.path.join(outdir, "orca")
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I", protos, "--python_out=" + out,
           os.path.join(protos, ORCA_PROTO)]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if res.returncode != 0:
        raise RuntimeError("protoc failed: %s\n%s" % (" ".join(cmd), res.stdout.decode(errors="replace")))


_orca = None


def load_orca():
    """The OrcaLoadReport module (xds.data.orca.v3), loaded from its file
    (it imports nothing), compiled first when needed."""
    global _orca
    if _orca is not None:
        return _orca
    import importlib.util
    gen = os.environ.get("MAITRED_TEST_GEN")
    if not gen:
        gen = tempfile.mkdtemp(prefix="maitred-gen-")
        atexit.register(shutil.rmtree, gen, True)
    path = os.path.join(gen, "orca", ORCA_PROTO.replace(".proto", "_pb2.py"))
    if not os.path.exists(path):
        compile_orca(gen)
    spec = importlib.util.spec_from_file_location("orca_load_report_pb2", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _orca = mod
    return mod


OTLP_PROTOS = ("common/v1/common.proto", "resource/v1/resource.proto", "trace/v1/trace.proto",
               "collector/trace/v1/trace_service.proto")


_loaded = None


def load():
    """Return (echo_pb2, echo_pb2_grpc), compiling first when needed."""
    global _loaded
    if _loaded is not None:
        return _loaded
    gen = os.environ.get("MAITRED_TEST_GEN")
    if not gen or not os.path.exists(os.path.join(gen, "maitred", "testing", "v1", "echo_pb2.py")):
        if not gen:
            gen = tempfile.mkdtemp(prefix="maitred-gen-")
            atexit.register(shutil.rmtree, gen, True)
        compile_into(gen)
    if gen not in sys.path:
        sys.path.insert(0, gen)
    from maitred.testing.v1 import echo_pb2, echo_pb2_grpc  # noqa: E402
    _loaded = (echo_pb2, echo_pb2_grpc)
    return _loaded


def load_otlp():
    """The OTLP trace service module (ExportTraceServiceRequest), compiled
    with echo.proto by load()."""
    load()
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402
    return trace_service_pb2


if __name__ == "__main__":
    # protogen.py OUTDIR: compile only (used by run.sh).
    compile_into(sys.argv[1])
