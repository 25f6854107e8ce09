#!/bin/sh
# Installs the languages beside Python named in $LANGUAGES (a comma list of r, javascript,
# bash) from what the host put into the build context, without network: Debian's packages
# in /tmp/debs, the JavaScript kernel's node_modules in /tmp/npm, the kernelspecs in
# /tmp/kernels (installed system-wide, where jupyter_client looks for the venv's Python).
# A package that brings a setuid or setgid file loses that bit: nothing in a sandbox runs
# as anyone but its own user.
set -eu
kernels=/opt/venv/share/jupyter/kernels
setid() { find / -xdev \( -perm -4000 -o -perm -2000 \) -type f 2>/dev/null | sort; }
setid >/tmp/setid.before
if ls /tmp/debs/*.deb >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive dpkg --install --force-confold /tmp/debs/*.deb >/dev/null
fi
mkdir -p "$kernels"
for language in $(echo "$LANGUAGES" | tr ',' ' '); do
  case "$language" in
    r) specs="r" ;;
    javascript) specs="javascript typescript"; mv /tmp/npm /opt/cellmate/npm ;;
    bash) specs="bash" ;;
    *) echo "unknown language: $language" >&2; exit 1 ;;
  esac
  for spec in $specs; do cp -r "/tmp/kernels/$spec" "$kernels/$spec"; done
done
# r-cran-irkernel's own spec ("ir") would list R twice; kernels/r is the one to use.
rm -rf /usr/share/jupyter/kernels/ir
setid >/tmp/setid.after
comm -13 /tmp/setid.before /tmp/setid.after | while read -r file; do
  echo "removing the setuid/setgid bit of $file"
  chmod ug-s "$file"
done
chmod -R a+rX,go-w "$kernels" /opt/cellmate
rm -rf /tmp/debs /tmp/npm /tmp/kernels /tmp/setid.before /tmp/setid.after \
  /var/cache/apt/archives/*.deb /var/lib/apt/lists/* \
  /usr/share/doc/* /usr/share/man/* /usr/share/info/*
