# Sourced by the install scripts (install.sh, install_vllm.sh, install_clients.sh): one way to
# install packages into a virtual environment.
#   venv_install VENV ARGS...    `pip install ARGS...` into VENV, done by uv when it can be had
#   venv_uninstall VENV PKGS...  `pip uninstall -y PKGS...` (a package that is not there is skipped)
#   venv_reuse_torch VENV VER    torch VER hard-linked from $REUSE_TORCH_FROM's venv, when it has it
# Why uv: pip unpacks one wheel at a time and byte-compiles every module it installs; uv unpacks in
# parallel and compiles nothing (Python compiles a module at its first import, and writes the
# byte-code unless PYTHONDONTWRITEBYTECODE is set). .venv from nothing, warm package cache, uv's own
# cache empty: 69 s with pip, 24 s with uv on the 2-core machine (docs/BENCHMARKS.md, "The test
# suite"). uv (UV_PIN) is installed into VENV by pip; where it cannot be had (no index
# has it), pip does the work, as before. INSTALLER=pip forces pip.
# uv does not read pip's configuration, so the settings that pick packages are handed over: pip's
# find-links, index-url, extra-index-url and constraint (from `pip config list`, which also shows
# PIP_* variables) and its cert (as SSL_CERT_FILE); --index-strategy unsafe-best-match keeps pip's
# choice across indexes (the best version anywhere, not the first index that has the name).
UV_PIN=uv==0.13.9

_pip_setting() {  # CONFIG NAME: NAME's value in `pip config list` output (PIP_* variables sort first)
  sed -n "s/^[^=]*\.$2='\(.*\)'$/\1/p" <<< "$1" | head -1
}

_use_uv() {  # VENV: uv is there and not refused
  [ "${INSTALLER:-uv}" != pip ] && [ -x "$1/bin/uv" ]
}

_venv_has_uv() {  # VENV: uv installed there (or installed now, with pip); false when it cannot be
  [ "${INSTALLER:-uv}" != pip ] || return 1
  _use_uv "$1" && return 0
  "$1/bin/python" -m pip install -q "$UV_PIN" >/dev/null 2>&1 && [ -x "$1/bin/uv" ] && return 0
  echo "venv_lib.sh: could not install $UV_PIN into $1; installing with pip" >&2
  return 1
}

_uv_args() {  # CONFIG: uv's arguments for pip's settings, one per line
  local config=$1 v
  echo "--index-strategy=unsafe-best-match"
  v=$(_pip_setting "$config" index-url)
  [ -z "$v" ] || echo "--index-url=$v"
  for v in $(_pip_setting "$config" extra-index-url); do echo "--extra-index-url=$v"; done
  for v in $(_pip_setting "$config" find-links); do echo "--find-links=$v"; done
  for v in $(_pip_setting "$config" constraint); do echo "--constraint=$v"; done
}

venv_install() {
  local venv=$1 config cert
  shift
  if _venv_has_uv "$venv"; then
    local args
    config=$("$venv/bin/python" -m pip config list 2>/dev/null || true)  # read once (0.3 s a read)
    mapfile -t args < <(_uv_args "$config")
    cert=${SSL_CERT_FILE:-$(_pip_setting "$config" cert)}
    env ${cert:+SSL_CERT_FILE="$cert"} "$venv/bin/uv" pip install --python "$venv/bin/python" \
      "${args[@]}" "$@"
  else  # as uv: nothing byte-compiled at install
    "$venv/bin/python" -m pip install --no-compile "$@"
  fi
}

venv_uninstall() {
  local venv=$1 present=() p
  shift
  for p in "$@"; do  # uv, unlike pip, fails on a package that is not installed
    "$venv/bin/python" -m pip show -q "$p" >/dev/null 2>&1 && present+=("$p")
  done
  [ ${#present[@]} -gt 0 ] || return 0
  if _use_uv "$venv"; then
    "$venv/bin/uv" pip uninstall -q --python "$venv/bin/python" "${present[@]}"
  else
    "$venv/bin/python" -m pip uninstall -q -y "${present[@]}"
  fi
}

# venv_reuse_torch VENV VERSION: with REUSE_TORCH_FROM=.venv (scripts/test.sh), when that venv holds
# torch VERSION and VENV has no torch yet, hard-link its files into VENV instead of unpacking the wheel
# again (~750 MB); the installer then sees torch installed and only adds what is missing. A later
# change in either venv writes new files, never the shared ones.
venv_reuse_torch() {
  local venv=$1 want=$2 from=${REUSE_TORCH_FROM:-} have src dst d
  [ -n "$from" ] && [ -x "$from/bin/python" ] || return 0
  have=$("$from/bin/python" -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null || true)
  src=$("$from/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  dst=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  if [ "$have" = "$want" ] && [ ! -e "$dst/torch" ]; then
    for d in torch functorch torchgen "torch-$have.dist-info"; do
      [ -e "$src/$d" ] && cp -al "$src/$d" "$dst/$d"
    done
    echo "torch $have hard-linked from $from"
  fi
}
