#!/usr/bin/env bash
# A real server between bork-ci and a model: installs LiteLLM's proxy
# (`litellm[proxy]` from PyPI, pinned) into a cached venv, starts it on 127.0.0.1 with mock
# responses for an OpenAI and an Anthropic model, and runs the README's quick start
# (examples/quickstart/run.sh) through it once per provider: `openai` (POST /v1/chat/completions)
# and `anthropic` (POST /v1/messages). Each run must exit 0 with a converged report and the
# spec's change applied. The mock answer is the quick start's converging edit, so one iteration
# converges; what is tested is the wire: bork-ci's requests (structured output, the output cap
# field, streaming, the key header) as a real OpenAI/Anthropic-compatible server reads them, and
# the answers (whole or streamed) as it writes them.
#
# Usage: ci/litellm-smoke.sh [path/to/bork-ci]   (default: target/debug/bork-ci, built if absent)
# The venv lives in ${XDG_CACHE_HOME:-~/.cache}/bork-ci/venv-litellm; LITELLM_VERSION pins it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
started=$SECONDS
bork=${1:-target/debug/bork-ci}
if [ ! -x "$bork" ]; then
    cargo build --locked --quiet
fi
bork=$(cd "$(dirname "$bork")" && pwd)/$(basename "$bork")

# 1.103 and later require certifi >= 2026.10.19, which the package index may not carry yet.
version=${LITELLM_VERSION:-1.102.4}
venv="${XDG_CACHE_HOME:-$HOME/.cache}/bork-ci/venv-litellm"
# The model price map ships with the package; fetching a newer one needs the internet.
export LITELLM_LOCAL_MODEL_COST_MAP=True
installed=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null || true)
if [ "$installed" != "$version" ] || [ ! -x "$venv/bin/litellm" ] \
    || ! "$venv/bin/python" -c 'import importlib.metadata as m; m.version("fastapi")' >/dev/null 2>&1; then
    echo "installing litellm[proxy]==$version into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "litellm[proxy]==$version"
fi
echo "litellm $version ready after $((SECONDS - started)) s"

work=$(mktemp -d "${TMPDIR:-/tmp}/bork-litellm.XXXXXX")
proxy_pid=
cleanup() {
    if [ -n "$proxy_pid" ]; then
        kill "$proxy_pid" 2>/dev/null || true
        wait "$proxy_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# The converging answer of the quick start's script, as the text both mock models answer.
answer=$(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["answers"][1]))' \
    examples/quickstart/scripted-answers.json)
master_key="sk-bork-smoke-$(date +%s)"
python3 - "$work/config.yaml" "$answer" "$master_key" <<'PY'
import json, sys
path, answer, key = sys.argv[1:4]
# YAML is a superset of JSON: the config is written as JSON so the answer needs no YAML quoting.
config = {
    "model_list": [
        {"model_name": "smoke-gpt-4o", "litellm_params": {
            "model": "openai/gpt-4o", "api_key": "sk-not-used", "mock_response": answer}},
        {"model_name": "smoke-claude", "litellm_params": {
            "model": "anthropic/claude-3-5-sonnet-20241022", "api_key": "sk-ant-not-used",
            "mock_response": answer}},
    ],
    "general_settings": {"master_key": key},
    "litellm_settings": {"telemetry": False},
}
with open(path, "w") as out:
    json.dump(config, out, indent=2)
PY

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LITELLM_LOG=ERROR LITELLM_TELEMETRY=False DISABLE_SCHEMA_UPDATE=True \
    "$venv/bin/litellm" --config "$work/config.yaml" --host 127.0.0.1 --port "$port" \
    >"$work/proxy.log" 2>&1 &
proxy_pid=$!
ready() {
    python3 -c 'import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]}), timeout=5)' \
        "http://127.0.0.1:$port/health/liveliness" "$master_key" >/dev/null 2>&1
}
for _ in $(seq 1 120); do
    if ready; then
        break
    fi
    if ! kill -0 "$proxy_pid" 2>/dev/null; then
        tail -n 40 "$work/proxy.log"
        echo "the LiteLLM proxy exited before it was ready" >&2
        exit 1
    fi
    sleep 1
done
ready || { tail -n 40 "$work/proxy.log"; echo "the LiteLLM proxy did not come up on port $port" >&2; exit 1; }
echo "litellm proxy on 127.0.0.1:$port after $((SECONDS - started)) s"

failed=0
smoke() {
    local provider=$1 model=$2 base_url=$3 key_var=$4
    local run_started=$SECONDS
    local out="$work/$provider.out" status=0
    env -u BORK_LLM_SCRIPT \
        BORK_LLM_PROVIDER="$provider" BORK_LLM_MODEL="$model" BORK_LLM_BASE_URL="$base_url" \
        BORK_LLM_MAX_RETRIES=0 BORK_LLM_TIMEOUT_SECS=60 "$key_var=$master_key" \
        TMPDIR="$work" sh examples/quickstart/run.sh "$bork" >"$out" 2>&1 || status=$?
    local report
    report=$(sed -n 's/^== exit code [0-9]*; report: //p' "$out")
    local outcome
    outcome=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["status"], len(r["iterations"]), r["usage"]["input-tokens"], r["usage"]["output-tokens"])' "$report" 2>/dev/null || echo "no report")
    local repo
    repo=$(dirname "$report")
    echo "$provider via $base_url: exit $status, report: $outcome ($((SECONDS - run_started)) s)"
    # What bork-ci had to learn about the server (a fallback is fine, and worth seeing).
    grep -E 'rejected|answered a streamed request whole|allows at most|more than the cap' "$out" || true
    # Converged, the spec's change applied, and the tokens the proxy reported counted.
    if [ "$status" -ne 0 ] || [ "${outcome%% *}" != converged ] || [ "${outcome##* }" = 0 ] \
        || ! grep -q 'name="${2:-world}"' "$repo/src/greet.sh" 2>/dev/null; then
        echo "-- $provider run output:"
        cat "$out"
        failed=1
    fi
}
smoke openai smoke-gpt-4o "http://127.0.0.1:$port/v1" OPENAI_API_KEY
smoke anthropic smoke-claude "http://127.0.0.1:$port" ANTHROPIC_API_KEY

if [ "$failed" -ne 0 ]; then
    echo "-- proxy log (last 60 lines):"
    tail -n 60 "$work/proxy.log"
    exit 1
fi
echo "litellm smoke passed in $((SECONDS - started)) s"
