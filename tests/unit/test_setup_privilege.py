"""A task's set-up keeps root only for commands that start no code of the repository: the install that
every SWE-bench record re-runs after the prediction (the agent's setup.py) runs as the test user."""

from swerl.grading.setup_privilege import root_may_run, split, units

# the set-up part of a SWE-bench eval script (swebench's make_eval_script_list, Django's eval_commands)
SWEBENCH_SET_UP = """\
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen
export LANG=en_US.UTF-8
git config --global --add safe.directory /testbed
git status
git show
git -c core.fileMode=false diff 3eb7e
source /opt/miniconda3/bin/activate
conda activate testbed
python -m pip install -e .
git checkout 3eb7e tests/test_x.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_x.py b/tests/test_x.py
+x = "$(rm -rf /)"
+if True:
EOF_114329324912""".splitlines()


def test_a_swebench_set_up_keeps_root_for_all_but_its_install():
    assert split(SWEBENCH_SET_UP, "/testbed") == [
        (True, SWEBENCH_SET_UP[:11]),
        (False, ["python -m pip install -e ."]),
        (True, SWEBENCH_SET_UP[12:]),
    ]


def test_a_quoted_here_document_is_data_and_an_unquoted_one_is_expanded():
    assert root_may_run(["git apply -v - <<'EOF'", "+$(id)", "EOF"], "/testbed")
    assert not root_may_run(["cat > /tmp/x <<EOF", "$(id)", "EOF"], "/testbed")
    assert root_may_run(["cat > /tmp/x <<EOF", "plain text", "EOF"], "/testbed")


def test_programs_that_could_run_repository_code_are_the_test_user_s():
    for line in ["python -m pip install -e .", "pip install -e .", "python setup.py develop", "make", "tox -e py",
                 "./runtests.py --setup", "bin/setup", "/testbed/bin/x", "source /testbed/env.sh", ". ./env.sh",
                 "conda run -n testbed python x.py", "echo `id`", "export V=$(python -c 'import x')",
                 "git status && python x.py", "git status | python -c 'import sys'", "( cd /testbed; ./x )",
                 "unknown-tool --flag"]:
        assert not root_may_run([line], "/testbed"), line


def test_root_keeps_the_publisher_s_own_commands():
    for line in ["/usr/bin/git status", "PYTHONPATH=/x git status", "git status 2>&1 > /tmp/log", ": 'marker'",
                 "echo done", "mkdir -p /tmp/x && cp /tmp/a /tmp/x/", "apt-get install -y locales",
                 "source /opt/miniconda3/bin/activate", "conda deactivate", "set -uxo pipefail",
                 "# a comment: python setup.py develop"]:
        assert root_may_run([line], "/testbed"), line


def test_commands_are_cut_whole():
    lines = ["if [ -f setup.py ]; then", "  echo yes", "fi", "for f in a b; do", "  echo $f", "done",
             'echo "two', 'lines"', "git status \\", "  --short", "cd /testbed"]
    assert units(lines) == [lines[0:3], lines[3:6], lines[6:8], lines[8:10], lines[10:]]
    # a compound command with a safe body is root's; a loop's variable is not a program root knows
    assert split(lines[:3], "/testbed") == [(True, lines[:3])]
    assert split(["if python -c 'import x'; then", "  echo yes", "fi"], "/testbed")[0][0] is False
    assert root_may_run(lines[6:8], "/testbed") and root_may_run(lines[8:10], "/testbed")


def test_a_compound_command_left_open_takes_the_rest_with_it():
    lines = ["git status", "if true; then", "  git status", "python x.py"]
    assert units(lines) == [["git status"], lines[1:]]
    assert split(lines, "/testbed") == [(True, ["git status"]), (False, lines[1:])]
