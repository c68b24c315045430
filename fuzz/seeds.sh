#!/bin/sh
# Regenerates the seeds of the signature_signify and signature_minisign fuzz targets
# (fuzz/corpus/signature_signify/, fuzz/corpus/signature_minisign/) with the real tools,
# one seed per form the parsers (src/signature/signify.rs, src/signature/minisign.rs)
# accept, and the embedded form signify makes that ringdl refuses:
#
#   signify (signify-openbsd -S, detached; the comment names the key's .pub):
#     image.sig               over a file
#     sha256sums.sig          over a SHA256SUMS (sha256sum's format)
#     sha256-bsd.sig          over a BSD-style SHA256 (sha256sum --tag), another key name
#     empty.sig               over an empty file
#     image.crlf.sig          image.sig with CRLF line ends (a Windows checkout, a web form)
#     image.no-newline.sig    image.sig without its last newline (pasted)
#     sha256-embedded.sig     signify -S -e: the message after the signature, as OpenBSD's
#                             SHA256.sig; refused ("text after the signature")
#   minisign (-S; four lines, the trusted comment always there):
#     image.minisig           prehashed (ED, the default), the default comments
#     image.legacy.minisig    legacy (-l, Ed), the default comments
#     sha256sums.comments.minisig         prehashed, own -c untrusted and -t trusted comment
#     sha256sums.legacy.comments.minisig  legacy, the same comments
#     empty.minisig           prehashed, over an empty file
#     image.crlf.minisig      image.minisig with CRLF line ends
#     image.no-newline.minisig  image.minisig without its last newline
#
# Each signature the tools made is verified with them before it is written. The keys are
# made afresh in a scratch directory (removed after), so a run writes new bytes in the
# same forms. Only the files named above are written; the corpus' msg.* seeds (copies of
# src/signature/testdata) stay as they are. Then `cargo test --test tests --
# fuzz_corpus::` replays them (dev profile: overflow checks on).
#
#   fuzz/seeds.sh
#
# Needs minisign (0.8 or later: prehashed by default) and signify-openbsd (Debian's
# packages of those names) and sha256sum.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
MINISIGN=${MINISIGN:-/usr/bin/minisign}
SIGNIFY=${SIGNIFY:-/usr/bin/signify-openbsd}
for t in "$MINISIGN" "$SIGNIFY"; do
    [ -x "$t" ] || { echo "seeds.sh: $t is missing (apt-get install minisign signify-openbsd)" >&2; exit 1; }
done
command -v sha256sum >/dev/null || { echo "seeds.sh: sha256sum is missing" >&2; exit 1; }
sf="$here/corpus/signature_signify"
mi="$here/corpus/signature_minisign"
mkdir -p "$sf" "$mi"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# The signed messages: a small image, its SHA256SUMS in both formats, an empty file.
printf 'ringdl fuzz seed image\n' >image.bin
sha256sum image.bin >SHA256SUMS
sha256sum --tag image.bin >SHA256
: >empty

# A seed file with CRLF line ends, and one without its last newline.
crlf() { sed 's/$/\r/' "$1" >"$2"; }
no_newline() { printf '%s' "$(cat "$1")" >"$2"; }

# signify: two keys (the comment of a signature names the secret key's .pub).
"$SIGNIFY" -G -n -p release.pub -s release.sec
"$SIGNIFY" -G -n -p openbsd-79-base.pub -s openbsd-79-base.sec
sign_sf() { # KEY MESSAGE SIG
    "$SIGNIFY" -S -s "$1.sec" -m "$2" -x "$3"
    "$SIGNIFY" -V -q -p "$1.pub" -m "$2" -x "$3"
}
sign_sf release image.bin "$sf/image.sig"
sign_sf release SHA256SUMS "$sf/sha256sums.sig"
sign_sf openbsd-79-base SHA256 "$sf/sha256-bsd.sig"
sign_sf release empty "$sf/empty.sig"
crlf "$sf/image.sig" "$sf/image.crlf.sig"
no_newline "$sf/image.sig" "$sf/image.no-newline.sig"
"$SIGNIFY" -S -e -s openbsd-79-base.sec -m SHA256 -x "$sf/sha256-embedded.sig"
"$SIGNIFY" -V -e -q -p openbsd-79-base.pub -m extracted -x "$sf/sha256-embedded.sig"
cmp -s extracted SHA256

# minisign: one key without a password (-W).
"$MINISIGN" -G -W -p mi.pub -s mi.key >/dev/null
sign_mi() { # MESSAGE SIG [minisign -S options]
    m=$1 s=$2
    shift 2
    "$MINISIGN" -S -s mi.key -m "$m" -x "$s" "$@" >/dev/null
    "$MINISIGN" -V -q -p mi.pub -m "$m" -x "$s"
}
sign_mi image.bin "$mi/image.minisig"
sign_mi image.bin "$mi/image.legacy.minisig" -l
untrusted='release 2026.12 of the appliance, key 1 of 2'
trusted='timestamp:1796133686	file:SHA256SUMS	release 2026.12 ✓ rootfs-b'
sign_mi SHA256SUMS "$mi/sha256sums.comments.minisig" -c "$untrusted" -t "$trusted"
sign_mi SHA256SUMS "$mi/sha256sums.legacy.comments.minisig" -l -c "$untrusted" -t "$trusted"
sign_mi empty "$mi/empty.minisig"
crlf "$mi/image.minisig" "$mi/image.crlf.minisig"
no_newline "$mi/image.minisig" "$mi/image.no-newline.minisig"

# The forms are the ones meant: ED / Ed, and the comments given.
sed -n 2p "$mi/image.minisig" | grep -q '^RU'
sed -n 2p "$mi/image.legacy.minisig" | grep -q '^RW'
grep -q "^trusted comment: $trusted\$" "$mi/sha256sums.legacy.comments.minisig"
grep -q "^untrusted comment: verify with openbsd-79-base.pub\$" "$sf/sha256-bsd.sig"
echo "seeds.sh: $(ls "$sf" | wc -l) seeds in $sf, $(ls "$mi" | wc -l) in $mi"
