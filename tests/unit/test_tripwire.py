"""The tripwire (grading/resources/swerl_tripwire.py) in a real interpreter run as an unprivileged user: what
it records from the agent's files, what it leaves alone (the same operations from the project's own files,
and what ordinary code does), and that code under test can neither see it nor silence it."""

from __future__ import annotations

import dis
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import types
from importlib import resources
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the tripwire stays off for root: a test drops to another user")

USER = 65534  # nobody
PYTHON = next(p for p in ("/usr/bin/python3", sys.executable) if os.path.exists(p))


@pytest.fixture
def sandbox():
    """A folder every user may read: the tripwire (its settings' path pointed here), its FIFO, and code files."""
    folder = Path(tempfile.mkdtemp(prefix="swerl-tripwire-"))
    os.chmod(folder, 0o755)
    source = resources.files("swerl.grading").joinpath("resources/swerl_tripwire.py").read_text()
    (folder / "swerl_tripwire.py").write_text(source.replace('"/tmp/swerl-grade/tripwire.conf"', repr(str(folder / "conf"))))
    os.mkfifo(folder / "wire")
    os.chmod(folder / "wire", 0o622)
    yield folder
    shutil.rmtree(folder)


def run_as_user(folder: Path, code: str, agent_files: tuple[str, ...] = ("agent.py",), runner: tuple[str, ...] = (),
                owner: int = 0, **modules: str) -> list[str]:
    """Run ``import agent`` (``code`` in agent.py, owned by ``owner``) as the test user with the tripwire in; its
    records. ``modules``: other modules beside it, the project's own (root's, unchanged); ``runner``: the
    runner's own folders, as root located them."""
    (folder / "agent.py").write_text(textwrap.dedent(code))
    os.chown(folder / "agent.py", owner, owner)
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    (folder / "conf").write_text("\n".join([str(folder / "wire"), *(str(folder / f) for f in agent_files),
                                            *(f"runner {path}" for path in runner)]) + "\n")
    reader = os.open(folder / "wire", os.O_RDWR | os.O_NONBLOCK)
    try:
        proc = subprocess.run([PYTHON, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import swerl_tripwire; "
                               "sys.modules.pop('swerl_tripwire'); import agent", str(folder)],
                              capture_output=True, text=True, timeout=60, cwd=folder,
                              preexec_fn=lambda: (os.setgroups([]), os.setresgid(USER, USER, USER), os.setresuid(USER, USER, USER)))
        data = b""
        while True:
            try:
                chunk = os.read(reader, 65536)
            except BlockingIOError:
                break
            data += chunk
    finally:
        os.close(reader)
    assert proc.returncode in (0, 86), proc.stderr
    lines = data.decode().splitlines()
    assert lines and lines[0].split("\t")[1] == "hello", lines  # the interpreter started with the hook in
    return [" ".join(line.split("\t")[1:]) for line in lines[1:]]


TAMPERING = {
    "code swapped": ("import testmod\ndef e():\n    pass\ntestmod.t.__code__ = e.__code__\n", "object.__setattr__"),
    "module class swapped": ("import sys, types\nclass M(types.ModuleType):\n    pass\n"
                             "sys.modules['json'] = __import__('json')\nsys.modules['json'].__class__ = M\n",
                             "object.__setattr__"),
    "frame by sys._getframe": ("import sys\nsys._getframe()\n", "sys._getframe"),
    "frame by inspect": ("import inspect\ninspect.currentframe()\n", "sys._getframe"),
    "frame off a traceback": ("try:\n    raise ValueError\nexcept ValueError as e:\n    e.__traceback__.tb_frame\n",
                              "object.__getattr__"),
    "frame in file-less code": ("exec(compile('import sys; sys._getframe()', '<string>', 'exec'))\n", "sys._getframe"),
    "every object": ("import gc\ngc.get_objects()\n", "gc.get_objects"),
    "every object, from a thread on a library function": (
        "import gc, threading\nt = threading.Thread(target=gc.get_objects)\nt.start()\nt.join()\n", "gc.get_objects"),
    "a trace function": ("import sys\nsys.settrace(None)\n", "sys.settrace"),
    "a profile function": ("import sys\nsys.setprofile(None)\n", "sys.setprofile"),
    "another process's environment": ("open('/proc/self/environ', 'rb').read()\n", "open"),
    "the interpreter's home for the next start": ("import os\nos.environ['PYTHONHOME'] = '/tmp'\n", "os.putenv"),
    "code claiming another file": ("compile('x = 1', '/usr/lib/python3/os.py', 'exec')\n", "compile"),
    "a program started": ("import subprocess\nsubprocess.run(['true'])\n", "subprocess.Popen"),
    "memory read through ctypes": ("import ctypes\nctypes.string_at(id(1), 8)\n", "ctypes.string_at"),
    "a test's bases swapped as its module defines it": (
        "import sys, types\nclass Quiet:\n    def run(self, result=None):\n        pass\n"
        "class Base:\n    def __init_subclass__(cls, **kw):\n        cls.__bases__ = (Quiet,)\n"
        "sys.modules['testmod2'] = m = types.ModuleType('testmod2')\n"
        "exec(compile('class TestX(Base):\\n    pass\\n', '<testmod2>', 'exec'), {**m.__dict__, 'Base': Base})\n",
        "object.__setattr__"),
    "a test class's bases swapped": ("import unittest, testmod\n"
                                     "class B(unittest.TestCase):\n    def run(self, result=None):\n        pass\n"
                                     "testmod.T.__bases__ = (B,)\n", "object.__setattr__"),
}
# the tests' own module (root's): what the tampering above aims at
TESTMOD = ("import unittest\n\ndef t():\n    assert False\n\nclass A(unittest.TestCase):\n    pass\n\n"
           "class T(A):\n    pass\n")


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_tampering_from_the_agent_s_file_is_recorded(sandbox, name):
    code, event = TAMPERING[name]
    records = run_as_user(sandbox, code, testmod=TESTMOD)
    assert [r.split(" ")[0] for r in records] == [event], records
    where = records[0].split(" ", 1)[1]
    assert where.startswith(str(sandbox / "agent.py") if "thread" not in name else "<no owner>")


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_the_same_from_the_project_s_own_unchanged_file_is_not(sandbox, name):
    assert run_as_user(sandbox, TAMPERING[name][0], agent_files=(), testmod=TESTMOD) == [] or "thread" in name


def test_where_the_repository_is_the_runner_the_patch_s_files_there_are_the_runner_s(sandbox):
    # pytest's own source, patched (a fix to `_pytest/assertion/rewrite.py` compiles trees, `_pytest/_code` reads
    # frames, pytester starts pytest): the runner's work, whoever changed it; the canaries judge the runner
    runner = (f"{sandbox}/",)
    for name in ("code claiming another file", "frame off a traceback", "a program started"):
        assert run_as_user(sandbox, TAMPERING[name][0], runner=runner, testmod=TESTMOD) == [], name
    # a tree compiled (its file name is not audited) by the runner's patched file, as the assertion rewriter does
    assert run_as_user(sandbox, "import ast\ncompile(ast.parse('x = 1'), '/testbed/t.py', 'exec')\n",
                       runner=runner) == []
    assert run_as_user(sandbox, "import ast\ncompile(ast.parse('x = 1'), '/testbed/t.py', 'exec')\n") == [
        f"compile {sandbox}/agent.py compile as None"]
    # a file the tests write into the runner's folder is theirs: the folder does not launder it
    records = run_as_user(sandbox, TAMPERING["a program started"][0], agent_files=(), runner=runner, owner=USER)
    assert [r.split(" ")[0] for r in records] == ["subprocess.Popen"], records


def test_the_agent_s_module_giving_itself_a_class_is_not_recorded(sandbox):
    # trio's __init__ ends with _deprecate.enable_attribute_deprecations(__name__): a library helper sets the
    # class of the module being imported. A fix that edits that __init__ makes it the agent's file
    shim = ("import sys, types\nclass D(types.ModuleType):\n    pass\n"
            "def give_class(name):\n    sys.modules[name].__class__ = D\n")
    code = ("import shim\nshim.give_class(__name__)\nimport sys, types\nclass M(types.ModuleType):\n    pass\n"
            "sys.modules[__name__].__class__ = M\n")
    assert run_as_user(sandbox, code, shim=shim) == []
    # another module's class, through the same helper, still is
    assert [r.split(" ")[0] for r in run_as_user(sandbox, "import json, shim\nshim.give_class('json')\n", shim=shim)] == [
        "object.__setattr__"]


ORDINARY = textwrap.dedent("""\
    import collections, dataclasses, inspect, json, logging, re, traceback, typing, warnings, os
    import ctypes  # loads its own libraries
    logging.getLogger("x").warning("logged with a stack %s", "lookup")
    warnings.warn("deprecated", DeprecationWarning)
    try:
        raise KeyError("x")
    except KeyError:
        traceback.format_exc()
        logging.getLogger("x").exception("with its traceback")
    Point = collections.namedtuple("Point", "x y")
    @dataclasses.dataclass
    class D:
        a: int = 1
    inspect.signature(lambda a, b=2: None)
    os.environ["MY_SETTING"] = "1"
    exec("y = 1")
    compile("z = 1", "<generated>", "exec")
    json.loads(json.dumps({"a": [1, 2]}))
    open(__file__).read()
    """)


def test_ordinary_code_in_the_agent_s_file_records_nothing(sandbox):
    assert run_as_user(sandbox, ORDINARY) == []


def test_a_pytest_plugin_s_own_classes_and_mock_s_own_functions_are_no_tampering(sandbox):
    # a fix to a pytest plugin (pytest-mock): its module's name starts with "pytest", it defines dataclasses and
    # builds autospecs, whose signature checkers unittest.mock edits for itself; and it changes its own functions
    plugin = textwrap.dedent("""\
        import dataclasses, unittest.mock

        @dataclasses.dataclass
        class MockCacheItem:
            mock: object
            patch: object = None

        def target(a, b=1):
            return a

        def build():
            spec = unittest.mock.create_autospec(target)
            spec(1)
            MockCacheItem.extra = 1  # its own class, after import
            target.__defaults__ = (2,)  # its own function
        """)
    records = run_as_user(sandbox, "import pytest_plugin_x\npytest_plugin_x.build()\n",
                          agent_files=("agent.py", "pytest_plugin_x.py"), pytest_plugin_x=plugin)
    assert records == []


def test_code_under_test_neither_finds_the_hook_nor_silences_it(sandbox):
    code = textwrap.dedent("""\
        import os, sys
        assert "swerl_tripwire" not in sys.modules
        # close every descriptor the hook could hold, then tamper: the hook cannot record, so the process ends
        for fd in range(3, 64):
            try:
                os.close(fd)
            except OSError:
                pass
        import json
        json.dumps.__code__ = (lambda: None).__code__
        print("survived")
        """)
    (sandbox / "agent.py").write_text(code)
    records = run_as_user(sandbox, code)
    assert records == []  # nothing could be written, and:
    proc = subprocess.run([PYTHON, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import swerl_tripwire; import agent",
                           str(sandbox)], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: (os.setgroups([]), os.setresgid(USER, USER, USER), os.setresuid(USER, USER, USER)))
    assert proc.returncode == 86 and "survived" not in proc.stdout  # a tripwire that cannot report fails closed


BLIND_BUILTINS = """\
    import builtins, testmod
    real_getattr, real_len, real_isinstance = builtins.getattr, builtins.len, builtins.isinstance
    # every code object seems to be the caller's own, no frame read counts, no /proc path is a str
    builtins.getattr = lambda obj, name, *d: __file__ if name == "co_filename" else real_getattr(obj, name, *d)
    builtins.len = lambda obj: 0 if type(obj) is tuple else real_len(obj)
    builtins.isinstance = lambda obj, cls: False if cls is str else real_isinstance(obj, cls)
    def e():
        pass
    testmod.t.__code__ = e.__code__
    """


def test_replacing_the_builtins_the_hook_calls_blinds_it_to_nothing(sandbox):
    records = run_as_user(sandbox, BLIND_BUILTINS, testmod=TESTMOD)
    assert [r.split(" ")[0] for r in records] == ["object.__setattr__"], records
    assert records[0].startswith(f"object.__setattr__ {sandbox / 'agent.py'} __code__ of t replaced")


def test_a_trusted_library_called_by_the_agent_is_no_trampoline(sandbox):
    # the project's own helper (or pytest's) doing the tampering the agent's code asked for
    helper = "import gc\n\ndef everything():\n    return gc.get_objects()\n\ndef swap(f, g):\n    f.__code__ = g.__code__\n"
    records = run_as_user(sandbox, "import helper, testmod\nhelper.everything()\nhelper.swap(testmod.t, lambda: 2)\n",
                          helper=helper, testmod=TESTMOD)
    assert [r.split(" ")[0] for r in records] == ["gc.get_objects", "object.__setattr__"]
    assert all(r.endswith("(through a library)") and str(sandbox / "agent.py") in r for r in records)


def test_what_a_library_does_as_it_is_imported_is_its_own_doing(sandbox):
    lib = "import gc\nOBJECTS = len(gc.get_objects())\n"
    assert run_as_user(sandbox, "import lib\n", lib=lib) == []


def test_the_hook_s_functions_look_up_no_global_name_not_even_a_builtin():
    # the module's functions are deleted once the hook is in (its namespace is anyone's who imports it again), and
    # code under test can replace `builtins.getattr` unseen: what the hook runs holds everything it calls in its
    # closures, bound before any code under test existed
    source = resources.files("swerl.grading").joinpath("resources/swerl_tripwire.py").read_text()
    module = compile(source, "swerl_tripwire.py", "exec")

    def closures(code, depth=0):
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                if depth:
                    yield const
                yield from closures(const, depth + 1)

    found = {code.co_name: {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
             for code in closures(module)}
    assert {"hook", "judge", "judge_setattr", "attribute", "record", "is_agent", "owner"} <= set(found)
    assert {name: sorted(names) for name, names in found.items()} == dict.fromkeys(found, [])
    namespace: dict = {}
    exec(module, namespace)  # as root: the hook stays off, the functions go all the same
    assert sorted(name for name in namespace if not name.startswith("__")) == ["CONFIG"]
