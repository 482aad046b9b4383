"""A stand-in for Miniconda in images laid out like SWE-bench's: the ``/opt/miniconda3`` paths,
``bin/activate`` (which defines a ``conda`` shell function over virtual environments in
``/opt/miniconda3/envs``) and the ``conda`` command, which only lists environments.

SWE-bench's eval scripts run ``source /opt/miniconda3/bin/activate`` then ``conda activate
testbed``; registry images (and conda itself) cannot always be downloaded, so swerl builds
images whose scripts behave the same way (:mod:`swerl.demo.swebench_images`).
"""

from __future__ import annotations

CONDA_ROOT = "/opt/miniconda3"
ENV_NAME = "testbed"
ENV_PREFIX = f"{CONDA_ROOT}/envs/{ENV_NAME}"
REPO_DIRECTORY = "/testbed"

# Sourced as `source /opt/miniconda3/bin/activate [ENV]`: defines `conda`, then activates ENV (default
# base), as Miniconda's own bin/activate does. POSIX sh, safe under `set -u`. It works from the
# environment variables alone, so a shell that inherited an activation (without the function) can
# activate again.
ACTIVATE_SCRIPT = r"""# swerl's stand-in for Miniconda's bin/activate, in an image laid out like SWE-bench's.
# Source it: `source /opt/miniconda3/bin/activate [ENV]` defines the `conda` shell function
# (`conda activate NAME|PREFIX`, `conda deactivate`) and activates ENV (default: base).
# Environments are Python virtual environments in /opt/miniconda3/envs/NAME.
_SWERL_CONDA_ROOT=/opt/miniconda3

_swerl_conda_path_without() {
    _swerl_conda_ifs=$IFS
    IFS=:
    _swerl_conda_kept=
    for _swerl_conda_dir in $PATH; do
        if [ "$_swerl_conda_dir" != "$1" ]; then
            _swerl_conda_kept=${_swerl_conda_kept:+$_swerl_conda_kept:}$_swerl_conda_dir
        fi
    done
    IFS=$_swerl_conda_ifs
    PATH=$_swerl_conda_kept
}

_swerl_conda_leave() {
    # leave the active environment, whether activated in this shell or inherited from a parent
    if command -v deactivate >/dev/null 2>&1; then
        deactivate
    fi
    if [ -n "${VIRTUAL_ENV:-}" ]; then
        _swerl_conda_path_without "$VIRTUAL_ENV/bin"
    fi
    if [ -n "${CONDA_PREFIX:-}" ]; then
        _swerl_conda_path_without "$CONDA_PREFIX/bin"
    fi
    _swerl_conda_path_without "$_SWERL_CONDA_ROOT/bin"
    _swerl_conda_path_without "$_SWERL_CONDA_ROOT/condabin"
    export PATH
    unset VIRTUAL_ENV VIRTUAL_ENV_PROMPT CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_PROMPT_MODIFIER CONDA_SHLVL
}

_swerl_conda_activate() {
    case "$1" in
        base|"$_SWERL_CONDA_ROOT") _swerl_conda_name=base; _swerl_conda_prefix=$_SWERL_CONDA_ROOT ;;
        */*) _swerl_conda_name=$1; _swerl_conda_prefix=$1 ;;
        *) _swerl_conda_name=$1; _swerl_conda_prefix=$_SWERL_CONDA_ROOT/envs/$1 ;;
    esac
    if [ "$_swerl_conda_prefix" != "$_SWERL_CONDA_ROOT" ] && [ ! -f "$_swerl_conda_prefix/bin/activate" ]; then
        echo "EnvironmentNameNotFound: Could not find conda environment: $1" >&2
        echo "You can list all discoverable environments with \`conda info --envs\`." >&2
        return 1
    fi
    _swerl_conda_leave
    PATH=$_SWERL_CONDA_ROOT/condabin:$PATH
    if [ "$_swerl_conda_prefix" = "$_SWERL_CONDA_ROOT" ]; then
        PATH=$_SWERL_CONDA_ROOT/bin:$PATH
        export PATH
        CONDA_SHLVL=1
    else
        export PATH
        VIRTUAL_ENV_DISABLE_PROMPT=1 . "$_swerl_conda_prefix/bin/activate"
        CONDA_SHLVL=2
    fi
    CONDA_PREFIX=$_swerl_conda_prefix
    CONDA_DEFAULT_ENV=$_swerl_conda_name
    CONDA_PROMPT_MODIFIER="($_swerl_conda_name) "
    CONDA_EXE=$_SWERL_CONDA_ROOT/bin/conda
    export CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_PROMPT_MODIFIER CONDA_SHLVL CONDA_EXE
    hash -r 2>/dev/null || true
}

_swerl_conda_deactivate() {
    if [ -z "${CONDA_PREFIX:-}" ]; then
        return 0
    fi
    if [ "$CONDA_PREFIX" != "$_SWERL_CONDA_ROOT" ]; then
        _swerl_conda_activate base  # an environment activated over base goes back to base
    else
        _swerl_conda_leave
        hash -r 2>/dev/null || true
    fi
}

conda() {
    case "${1:-}" in
        activate) _swerl_conda_activate "${2:-base}" ;;
        deactivate) _swerl_conda_deactivate ;;
        *) "$_SWERL_CONDA_ROOT/condabin/conda" "$@" ;;
    esac
}

_swerl_conda_activate "${1:-base}"
"""

# The `conda` command itself: lists environments; activation needs the shell function above.
CONDA_COMMAND = r"""#!/bin/sh
# swerl's stand-in for the conda command, in an image laid out like SWE-bench's.
root=/opt/miniconda3
list_envs() {
    echo "# conda environments:"
    echo "#"
    mark=" "; [ "${CONDA_PREFIX:-}" = "$root" ] && mark="*"
    printf '%-25s %s %s\n' base "$mark" "$root"
    for env in "$root"/envs/*; do
        [ -f "$env/bin/activate" ] || continue
        mark=" "; [ "${CONDA_PREFIX:-}" = "$env" ] && mark="*"
        printf '%-25s %s %s\n' "$(basename "$env")" "$mark" "$env"
    done
}
case "${1:-}" in
    activate|deactivate)
        echo "CondaError: Run 'source $root/bin/activate' before 'conda $1': this shell has no conda function." >&2
        exit 1 ;;
    info)
        case "${2:-}" in --envs|-e) list_envs; exit 0 ;; esac
        echo "     active environment : ${CONDA_DEFAULT_ENV:-None}"
        echo "    active env location : ${CONDA_PREFIX:-None}"
        echo "       base environment : $root"
        echo "          envs directories : $root/envs" ;;
    env)
        case "${2:-}" in list) list_envs; exit 0 ;; esac
        echo "conda env ${2:-}: not available in this image (only 'conda env list')" >&2
        exit 1 ;;
    *)
        echo "conda ${1:-}: not available in this image; it supports activate, deactivate, info --envs, env list" >&2
        exit 1 ;;
esac
"""
