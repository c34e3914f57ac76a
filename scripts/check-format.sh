#!/usr/bin/env bash
# Checks that the files .clang-format-covered lists are as clang-format (.clang-format) writes them;
# with --fix, rewrites them. A file joins the list once it is formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(grep -v '^#' .clang-format-covered | grep .)
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run --Werror "${files[@]}"
  echo "check-format: ${#files[@]} files as .clang-format writes them"
fi
