# bash completion for pcached(8)
_pcached() {
  local cur prev words cword
  _init_completion || return
  local verbs="add remove list status set flush pmem"
  local verb="" i
  for ((i = 1; i < cword; i++)); do
    case "${words[i]}" in
      --socket) ((i++)) ;;
      -*) ;;
      *) verb=${words[i]}; break ;;
    esac
  done
  if [[ -z $verb ]]; then
    COMPREPLY=($(compgen -W "$verbs --socket --json --help" -- "$cur"))
    return
  fi
  case $prev in
    --cache | --backing) _filedir; return ;;
    --mode) COMPREPLY=($(compgen -W "writeback" -- "$cur")); return ;;
    --copy-policy) COMPREPLY=($(compgen -W "auto nt clflushopt clwb threshold:" -- "$cur")); return ;;
  esac
  local caches
  caches=$(pcached --json list 2>/dev/null | sed -n 's/.*"name": "\(.*\)".*/\1/p')
  case $verb in
    add) COMPREPLY=($(compgen -W "--cache --backing --name --queues --depth --mode --copy-policy --segment-size --format --force --allow-volatile-region" -- "$cur")) ;;
    remove) COMPREPLY=($(compgen -W "$caches --no-flush --force" -- "$cur")) ;;
    status | flush) COMPREPLY=($(compgen -W "$caches" -- "$cur")) ;;
    set)
      if [[ $prev == set ]]; then COMPREPLY=($(compgen -W "$caches" -- "$cur"))
      else COMPREPLY=($(compgen -W "gc_threshold read_miss_fill copy_policy" -- "$cur")); fi ;;
    pmem) COMPREPLY=($(compgen -W "list" -- "$cur")) ;;
  esac
}
complete -F _pcached pcached
