# Sourced by scripts/install-runtime.sh and benchmarks/setup-qwen-tts-venv.sh: where pip
# takes torch +cpu from (PyPI has no +cpu build), first match wins:
#   OMNI_CPU_TORCH_INDEX=URL   a PyTorch CPU package index (or mirror) you name;
#   https://download.pytorch.org/whl/cpu   when it answers within a few seconds;
#   pip's own configuration   e.g. a local wheel folder given as find-links.
pytorch_cpu_index=https://download.pytorch.org/whl/cpu

# torch_index_args PYTHON: sets the array index_args to pip's --extra-index-url for
# torch +cpu, or to nothing where pip's own configuration is to be used.
torch_index_args() {
  index_args=()
  if [ -n "${OMNI_CPU_TORCH_INDEX:-}" ]; then
    index_args=(--extra-index-url "$OMNI_CPU_TORCH_INDEX")
  elif "$1" -c "import urllib.request as u; u.urlopen('$pytorch_cpu_index/torch/', timeout=5)" \
      2>/dev/null; then
    index_args=(--extra-index-url "$pytorch_cpu_index")
  fi
}
