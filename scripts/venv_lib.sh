# Sourced by the install scripts (install.sh, install_vllm.sh, install_clients.sh): one way to
# install packages into a virtual environment.
#   venv_install VENV ARGS...    `pip install ARGS...` into VENV, done by uv when it can be had
#   venv_uninstall VENV PKGS...  `pip uninstall -y PKGS...` (a package that is not there is skipped)
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

_pip_setting() {  # VENV NAME: the value pip uses for NAME (PIP_* variables sort first), else empty
  "$1/bin/python" -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.$2='\(.*\)'$/\1/p" | head -1
}

_venv_has_uv() {  # VENV: uv installed there (or installed now, with pip); false when it cannot be
  [ "${INSTALLER:-uv}" != pip ] || return 1
  [ -x "$1/bin/uv" ] && return 0
  "$1/bin/python" -m pip install -q "$UV_PIN" >/dev/null 2>&1 && [ -x "$1/bin/uv" ] && return 0
  echo "venv_lib.sh: could not install $UV_PIN into $1; installing with pip" >&2
  return 1
}

_uv_args() {  # VENV: uv's arguments for pip's settings, one per line
  local venv=$1 v
  echo "--index-strategy=unsafe-best-match"
  v=$(_pip_setting "$venv" index-url)
  [ -z "$v" ] || echo "--index-url=$v"
  for v in $(_pip_setting "$venv" extra-index-url); do echo "--extra-index-url=$v"; done
  for v in $(_pip_setting "$venv" find-links); do echo "--find-links=$v"; done
  for v in $(_pip_setting "$venv" constraint); do echo "--constraint=$v"; done
}

venv_install() {
  local venv=$1 cert
  shift
  if _venv_has_uv "$venv"; then
    local args
    mapfile -t args < <(_uv_args "$venv")
    cert=${SSL_CERT_FILE:-$(_pip_setting "$venv" cert)}
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
  if [ -x "$venv/bin/uv" ] && [ "${INSTALLER:-uv}" != pip ]; then
    "$venv/bin/uv" pip uninstall -q --python "$venv/bin/python" "${present[@]}"
  else
    "$venv/bin/python" -m pip uninstall -q -y "${present[@]}"
  fi
}
