#!/usr/bin/env bash
# Prints the package pattern of every module of the repository, one a line:
# ./... for the library, then ./bench/..., ./examples/... and so on, as the
# go.work file at the root lists them. `go test ./...` at the root covers
# the library module only; the Makefile and the test scripts pass these
# patterns to one go command so that it vets or tests every module, as
# `go test ./...` did before the tests got modules of their own:
#
#	go test -race $(bash scripts/packages.sh)
#
# Fails unless the go command uses the repository's go.work (GOWORK=off or
# another workspace would leave modules out without a word).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO="${GO:-go}"
root="$(pwd -P)"
work="$("$GO" env GOWORK)"
if [[ "$work" != "$root/go.work" ]]; then
  echo "packages.sh: the go command must use $root/go.work (go env GOWORK is '${work}')" >&2
  exit 1
fi
"$GO" list -m -f '{{.Dir}}' | while read -r dir; do
  case "$dir" in
    "$root") echo "./..." ;;
    "$root"/*) echo "./${dir#"$root"/}/..." ;;
    *) echo "packages.sh: workspace module $dir is outside $root" >&2; exit 1 ;;
  esac
done
