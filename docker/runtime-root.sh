#!/usr/bin/env bash
# Makes the root filesystem of a runtime image: the binaries, exactly the
# shared libraries the loader maps for them (ldd: their DT_NEEDED closure,
# resolved as on this build machine, alternatives such as libblas.so.3
# included, each under the name the binaries ask for), the loader itself,
# tini, and passwd/group entries for uid 65532. Nothing else: no shell, no
# package manager, no setuid or setgid file.
# Usage: docker/runtime-root.sh OUT BINARY...
set -euo pipefail
out=$1; shift
libs=$out/usr/lib/x86_64-linux-gnu
mkdir -p "$out/usr/local/bin" "$out/usr/bin" "$libs" "$out/lib64" "$out/etc" "$out/tmp"
chmod 1777 "$out/tmp"
for binary in "$@"; do
  install -m 0755 "$binary" "$out/usr/local/bin/"
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    cp -L "$path" "$libs/$name"
  done
done
cp -L /lib64/ld-linux-x86-64.so.2 "$out/lib64/"
# The static build: it must run before any library is there to load.
install -m 0755 /usr/bin/tini-static "$out/usr/bin/tini"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin\n' > "$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$out/etc/group"
chmod -R u=rwX,go=rX "$out/usr" "$out/lib64" "$out/etc"
find "$out" -type f -perm /6000 -exec chmod ug-s {} +
echo "$(find "$libs" -type f | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out" >&2
