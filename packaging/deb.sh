#!/bin/sh
# packaging/deb.sh VERSION - build bin/deb/pmjail_<debian version>_amd64.deb
# from what `make build` and `npm ci` left in the checkout (make deb runs
# it from the repository's root). nfpm comes pinned from the Go module
# proxy; GO names the go command (default: go).
set -eu

[ $# -eq 1 ] || { echo "usage: packaging/deb.sh VERSION" >&2; exit 2; }
version=$1
out=bin/deb
NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2

# debian_version turns `git describe --tags --always --dirty` into a
# Debian version, which must start with a digit and in which '~' sorts
# before and '+' after the version it follows:
#   v1.2.0                -> 1.2.0
#   v1.2.0-rc1            -> 1.2.0~rc1
#   v1.2.0-5-gabc1234     -> 1.2.0+5.gabc1234  (5 commits after the tag)
#   abc1234 (no tag yet)  -> 0~<commits>.gabc1234
#   dev (no git)          -> 0~dev
# and -dirty            -> +dirty, or .dirty after a + or ~ part.
debian_version() {
	if echo "$1" | grep -Eq '^[0-9a-f]+(-dirty)?$'; then
		commits=$(git rev-list --count HEAD 2>/dev/null || echo 0)
		echo "0~$commits.g$1" | sed -e 's/-dirty$/.dirty/'
		return
	fi
	echo "$1" | sed -e 's/^v//' -e 's/-\([0-9]*\)-g\([0-9a-f]*\)/+\1.g\2/' \
		-e 's/-dirty$/+dirty/' -e 's/-/~/g' -e 's/\([+~].*\)+dirty$/\1.dirty/' \
		-e 's/^[^0-9]/0~&/'
}

for f in bin/pmjail bin/pmjail-serve bin/pmjail-init node_modules/@deno/linux-x64-glibc/deno node_modules/pyodide/pyodide.mjs; do
	[ -e "$f" ] || { echo "packaging/deb.sh: $f is missing: run make build (and make deps) first" >&2; exit 1; }
done

PMJAIL_DEB_VERSION=$(debian_version "$version")
export PMJAIL_DEB_VERSION
rm -rf "$out"
mkdir -p "$out"
# The units as deploy/ has them, with the package's paths: /usr, not the
# /usr/local of a manual install.
sed -e 's|/usr/local/bin/|/usr/bin/|g' -e 's|/usr/local/lib/pmjail/|/usr/lib/pmjail/|g' \
	deploy/pmjail.service > "$out/pmjail.service"
if grep -q /usr/local "$out/pmjail.service"; then
	echo "packaging/deb.sh: deploy/pmjail.service names a /usr/local path the package does not move" >&2
	exit 1
fi
# Debian's copyright file: the licence's full text stays in LICENSE,
# shipped whole.
{
	echo 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/'
	echo 'Upstream-Name: pmjail'
	echo 'Source: https://github.com/pmjail/pmjail'
	echo
	echo 'Files: *'
	echo 'Copyright: the pmjail authors'
	echo 'License: Apache-2.0'
	sed -e 's/^$/./' -e 's/^/ /' LICENSE
	echo
	echo 'Files: usr/lib/pmjail/node_modules/@deno/*'
	echo 'Copyright: the Deno authors'
	echo 'License: MIT'
	echo
	echo 'Files: usr/lib/pmjail/node_modules/pyodide/*'
	echo 'Copyright: the Pyodide authors'
	echo 'License: MPL-2.0'
} > "$out/copyright"
"${GO:-go}" run "$NFPM" package --config packaging/nfpm.yaml --packager deb --target "$out/"
ls "$out"/pmjail_*.deb
