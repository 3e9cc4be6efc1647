#!/usr/bin/env bash
# Interoperability of package secrets with the Python flechtctl 0.17.0 and
# flechtwerk[secrets] 0.17.0 (from PyPI), both directions: a Python 3.13
# venv makes keyrings (plain and password-protected) and tokens of every
# key kind, scoped and unscoped, which Go opens, verifies or refuses
# (TestInterop in ./secrets); Go then makes its own, which flechtctl
# opens, verifies or refuses (interop.py check). The admin command's
# verbs are exercised against flechtctl's command line too.
#
# Environment:
#   GO        go binary (default: go)
#   PYTHON    a Python 3.13 interpreter (default: pyenv's 3.13, else python3.13)
#   SECRETS_VENV  the venv to use or create (default: a cached one under
#             ${XDG_CACHE_HOME:-~/.cache}/flechtwerk)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
GO="${GO:-go}"
VERSION=0.17.0

find_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  local root="${PYENV_ROOT:-$HOME/.pyenv}" p
  for p in "$root"/versions/3.13*/bin/python3.13; do
    if [ -x "$p" ]; then echo "$p"; return; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    p="$(pyenv prefix 3.13 2>/dev/null || true)"
    if [ -n "$p" ] && [ -x "$p/bin/python3.13" ]; then echo "$p/bin/python3.13"; return; fi
  fi
  command -v python3.13 || { echo "interop: no Python 3.13 (set PYTHON)" >&2; exit 1; }
}
python="$(find_python)"
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version' ||
  { echo "interop: $python is not Python 3.13" >&2; exit 1; }

venv="${SECRETS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/flechtwerk/secrets-venv-$VERSION}"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(not (m.version('flechtctl') == m.version('flechtwerk') == '$VERSION'))" 2>/dev/null; then
  echo "==> creating $venv (flechtctl==$VERSION, flechtwerk[secrets]==$VERSION)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "flechtctl==$VERSION" "flechtwerk[secrets]==$VERSION"
fi
"$venv/bin/python" -c 'import flechtwerk.secrets, flechtctl.tokens' # the extra installs and imports

work="$(mktemp -d -t flechtwerk-secrets-XXXXXX)"
trap 'rm -rf "$work"' EXIT INT TERM
cd "$ROOT"

echo "==> Python makes keyrings and tokens; Go opens, verifies and refuses them, then makes its own"
"$venv/bin/python" "$SCRIPT_DIR/interop.py" make "$work"
if ! SECRETS_INTEROP_DIR="$work" "$GO" test -count=1 -run '^TestInterop$' -v ./secrets/ >"$work/go-test.log" 2>&1; then
  cat "$work/go-test.log"
  exit 1
fi
echo "Go: $(grep -c -- '--- PASS: TestInterop/' "$work/go-test.log") Python-made tokens opened, verified or refused as expected"
echo "==> flechtctl opens, verifies and refuses what Go made"
"$venv/bin/python" "$SCRIPT_DIR/interop.py" check "$work"

echo "==> the admin command against the flechtctl command line"
fw="$work/flechtwerk"
"$GO" build -o "$fw" ./cmd/flechtwerk
ctl="$venv/bin/flechtctl"
pw="$work/cli-password"
printf 'cli keyring password 0.17\n' >"$pw"
cd "$work"
# A protected keyring made by the admin command, edited by flechtctl, used by both.
"$fw" keyring create cli.jwe --kid c-old --protect --password-file "$pw"
"$fw" keyring add cli.jwe --kid c-x --type x25519 --scope api_key --primary-for api_key --password-file "$pw"
"$ctl" keyring add cli.jwe --kid c-s --type ed25519 --scope api_key --signing-for api_key --password-file "$pw"
"$fw" keyring rotate cli.jwe --kid c-new --password-file "$pw"
printf 'value-one' >secret.txt
export INTEROP_SECRET='value-two'
old="$("$ctl" encrypt -k cli.jwe --password-file "$pw" --string - <secret.txt)" # sealed before the next rotation
"$ctl" keyring add cli.jwe --kid c-newer --primary --password-file "$pw"
tokens=(
  "$("$fw" seal --keyring cli.jwe --password-file "$pw" --string --in secret.txt)"
  "$("$fw" seal --keyring cli.jwe --password-file "$pw" --string --scope api_key --env INTEROP_SECRET)"
  "$("$ctl" encrypt -k cli.jwe --password-file "$pw" --scope api_key --string - <secret.txt)"
  "$old"
)
scope_of() { "$ctl" inspect "$1" | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["header"].get("flenc_scope", ""))'; }
for tok in "${tokens[@]}"; do
  scope="$(scope_of "$tok")"
  a="$("$fw" open --keyring cli.jwe --password-file "$pw" --scope "$scope" --string "$tok")"
  b="$("$ctl" decrypt -k cli.jwe --password-file "$pw" --scope "$scope" --string "$tok")"
  [ "$a" = "$b" ] || { echo "interop: the admin command opened $a, flechtctl $b" >&2; exit 1; }
  case "$a" in value-one | value-two) ;; *) echo "interop: unexpected value $a" >&2; exit 1 ;; esac
done
sig="$("$fw" sign --keyring cli.jwe --password-file "$pw" --scope api_key --string --env INTEROP_SECRET)"
[ "$("$ctl" verify -k cli.jwe --password-file "$pw" --scope api_key --string "$sig")" = value-two ]
sig="$("$ctl" sign -k cli.jwe --password-file "$pw" --scope api_key --string - <secret.txt)"
[ "$("$fw" verify --keyring cli.jwe --password-file "$pw" --scope api_key --string "$sig")" = value-one ]
if "$fw" open --keyring cli.jwe --password-file "$pw" --scope db "${tokens[1]}" 2>err.txt; then
  echo "interop: a token scoped api_key opened as db" >&2; exit 1
fi
grep -q SECRET_SCOPE_REFUSED err.txt
# A writer holding only the public half of the recipient key: exported by
# the admin command, imported by flechtctl, sealed with by the admin command.
"$fw" keyring export cli.jwe c-x --password-file "$pw" >c-x.jwk
"$ctl" keyring import writer.json c-x.jwk --primary
tok="$("$fw" seal --keyring writer.json --scope api_key --string --env INTEROP_SECRET)"
[ "$("$ctl" decrypt -k cli.jwe --password-file "$pw" --scope api_key --string "$tok")" = value-two ]
[ "$("$fw" open --keyring cli.jwe --password-file "$pw" --scope api_key --string "$tok")" = value-two ]
if "$fw" open --keyring writer.json --scope api_key "$tok" 2>err.txt; then
  echo "interop: a public-only keyring opened a token" >&2; exit 1
fi
grep -q SECRET_NO_PRIVATE_KEY err.txt
echo "==> interop: ok (flechtctl $VERSION, $("$python" --version))"
