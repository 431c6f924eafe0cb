# berth: the pull of a container rank's image, as the rank's user, before its steps run
# (docs/containers.md "Images"). Compiled into the agent (agent/pull_script.h); PullScript
# (agent/container.cpp) puts these before it, each shell-quoted:
#   store run       the user's image store on this node and its run dir (the agent made both theirs)
#   image cache     the image reference; the file keeping what a tag resolved to ("DIGEST REF")
#   wrapper         the text of the user's podman wrapper kept in the store ($BERTH_PODMAN)
#   policy          container.pull: always, missing or never
#   pinned digest   1 and the digest when the reference names one ("...@sha256:..."), else 0 and ""
#   tag_ttl         seconds a tag's answer is taken as it was (0: asked each time)
#   probe_host probe_port probe_secs   the registry's address, to skip it when it takes no
#                   connection and the node has a copy ("": no probe)
#   registry name retries pull_flags progress_every
# and the function `pd`: podman with the user's store on this node.

# The user's own directories below the two the agent made theirs.
umask 077
mkdir -p "$store/storage" "$store/tmp" "$store/tags" "$store/download" "$run/run" "$run/xdg" ||
  exit 125
export XDG_RUNTIME_DIR="$run/xdg"
# The user's podman on this node, with this store ($BERTH_PODMAN in every job): rewritten when it
# says something else (another agent version), else left alone (read by bash itself: a warm start
# spawns nothing for it).
current=
IFS= read -rd '' current 2>/dev/null <"$store/podman"
if [ "$current" != "$wrapper"$'\n' ]; then
  printf '%s\n' "$wrapper" >"$store/podman.new.$$" && chmod 700 "$store/podman.new.$$" &&
    mv -f "$store/podman.new.$$" "$store/podman"
fi
# Containers of this user's jobs killed past their grace leave a record (no process): removed once
# five minutes old (a younger one may be a job's on its way to start), and only when the store
# lists any (a podman call costs tens of milliseconds).
if grep -qs '"berth-' "$store"/storage/*-containers/containers.json; then
  pd container prune -f --filter label=berth.job --filter until=5m >/dev/null 2>&1
fi
# Whether digest $1 is an image here, without asking podman: the store's image list.
known() { grep -qs "\"$1\"" "$store"/storage/*-images/images.json; }

# A warm image needs no lock and no podman: one pinned by digest that is here, or a tag asked of
# its registry less than tag_ttl seconds ago whose answer is here.
if [ "$pinned" = 1 ] && [ "$policy" != always ]; then
  if known "$digest"; then
    echo "berth: image $image is $digest"
    exit 0
  fi
elif [ "$pinned" = 0 ] && [ "$policy" = missing ] && [ "$tag_ttl" -gt 0 ]; then
  if [ -f "$cache" ] && [ $(($(date +%s) - $(stat -c %Y "$cache"))) -lt "$tag_ttl" ]; then
    read -r d r <"$cache"
    if [ "$r" = "$image" ] && known "$d"; then
      echo "berth: image $image is $d"
      exit 0
    fi
  fi
fi

# One pull at a time of this user's on this node (released while waiting to try again): a second
# job of an image waits for the first pull, then finds its layers here.
exec 9>>"$store/pull.lock" && flock 9
# What a killed pull left of its downloads (only one pull of the user's runs: the lock).
rm -rf "$store/download"/* 2>/dev/null

# berth_progress: while podman pulls (with $log its output), every progress_every seconds a line
# "berth: pull progress: L layers, B bytes" when B grew. podman prints nothing while a layer
# downloads when its output is not a terminal; it downloads each blob into a file under TMPDIR (the
# user's download dir: one pull of theirs at a time, under the lock), so the largest size each file
# reached, summed, is what came so far. L counts the blobs it fetches ("Copying blob" lines, not
# those "skipped: already exists").
export TMPDIR="$store/download"
berth_progress() {
  local -A most
  local last=0 total size name v layers
  while :; do
    # A wait that nothing outlives when the reporter is killed (no sleep left running): a read, by
    # bash itself, of a pipe that nobody writes, for as long as the timeout.
    read -rt "$progress_every" <> <(:)
    while read -r size name; do
      [ "${most[$name]:-0}" -lt "$size" ] && most[$name]=$size
    done < <(find "$TMPDIR" -type f -printf '%s %p\n' 2>/dev/null)
    total=0
    for v in "${most[@]}"; do total=$((total + v)); done
    [ $total -gt $last ] || continue
    last=$total
    layers=$(grep '^Copying blob' "$log" | grep -vc 'skipped')
    echo "berth: pull progress: $layers layers, $total bytes"
  done
}

digest=$(pd image inspect --format '{{.Digest}}' "$image" 2>/dev/null) && have=1 || have=0
if [ "$policy" = never ]; then
  if [ $have = 0 ]; then
    echo "berth: image pull failed: $image is not on this node (container.pull: never)" >&2
    exit 125
  fi
  echo "berth: image $image is $digest"
  exit 0
fi

# missing: an image pinned by digest that is here is used as it is (may_skip); a tag is asked of
# its registry (a moved tag brings its new layers; the others are not downloaded), and where the
# registry cannot be reached the node's copy is used (may_fall_back). always: asked each time, and
# a failure is final.
may_skip=0
may_fall_back=0
if [ "$policy" = missing ]; then
  if [ "$pinned" = 1 ]; then may_skip=1; else may_fall_back=1; fi
fi
unreached=0
# The node's copy without podman's retries when the registry does not even take a connection.
if [ $may_fall_back = 1 ] && [ -n "$probe_host" ] && [ $have = 1 ] &&
  [ -z "$HTTPS_PROXY$https_proxy$HTTP_PROXY$http_proxy$ALL_PROXY$all_proxy" ] &&
  ! timeout "$probe_secs" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$probe_host" "$probe_port" \
    2>/dev/null; then
  unreached=1
  echo "berth: the registry $registry could not be reached; using this node's copy of $image"
fi

if [ $have = 0 ] || { [ $may_skip = 0 ] && [ $unreached = 0 ]; }; then
  if [ $have = 0 ]; then echo "berth: pulling $image"; else echo "berth: checking $image at its registry"; fi
  # On the run dir (tmpfs where it can be), not on the disk that may be full.
  log="$XDG_RUNTIME_DIR/pull-$name.log"
  delay=2 tries=0 pruned=0 unreachable=0
  while :; do
    : >"$log"
    berth_progress &
    reporter=$!
    # podman's warning that / is not a shared mount (rootless, on most hosts) says nothing about
    # the job: not in its output.
    # shellcheck disable=SC2086 # pull_flags is a list of flags
    pd pull $pull_flags "$image" 2>&1 |
      grep --line-buffered -v 'is not a shared mount, this could cause issues' | tee "$log"
    rc=${PIPESTATUS[0]}
    kill $reporter 2>/dev/null
    wait $reporter 2>/dev/null
    [ $rc = 0 ] && break
    unreachable=0
    # A full disk: this user's images that no container uses go (once), then it is tried again;
    # still full, the job fails naming the sizes.
    if grep -qi 'no space left on device' "$log"; then
      if [ $pruned = 0 ]; then
        pruned=1
        echo "berth: the disk is full; removing your images that no container uses"
        pd image prune -a -f >/dev/null 2>&1
        continue
      fi
      echo "berth: image pull failed: no space left on device for $image: your images on this node take $(du -sh "$store/storage" 2>/dev/null | cut -f1), the disk has $(df -h --output=avail "$store" 2>/dev/null | tail -1 | tr -d ' ') free" >&2
      break
    fi
    # A registry's name that does not resolve is not tried again (DNS answered: there is no such
    # host), nor is a wrong name or a refused login; only a registry that could not be reached is,
    # and not when the node's copy will do (podman has retried already).
    if grep -qi 'no such host' "$log"; then
      unreachable=1
      break
    fi
    grep -qiE 'connection refused|i/o timeout|network is unreachable|no route to host|TLS handshake timeout|connection reset|: 50[234] ' "$log" || break
    unreachable=1
    [ $have = 1 ] && [ $may_fall_back = 1 ] && break
    [ $tries -ge "$retries" ] && break
    tries=$((tries + 1))
    echo "berth: the registry could not be reached; trying again in ${delay}s"
    flock -u 9
    sleep $delay
    flock 9
    delay=$((delay * 2))
  done
  rm -f "$log"
  if [ $rc != 0 ] && [ $unreachable = 1 ] && [ $have = 1 ] && [ $may_fall_back = 1 ]; then
    echo "berth: the registry could not be reached; using this node's copy of $image"
  elif [ $rc != 0 ]; then
    exit $rc
  fi
  digest=$(pd image inspect --format '{{.Digest}}' "$image") || exit 125
  if [ $rc = 0 ] && [ "$pinned" = 0 ]; then printf '%s %s\n' "$digest" "$image" >"$cache"; fi
elif [ $unreached = 0 ]; then
  echo "berth: image $image is on this node"
fi
echo "berth: image $image is $digest"
