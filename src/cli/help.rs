//! The `--help` text.

/// The `--help` text.
pub const HELP: &str = "\
ringdl - download files over HTTP or HTTPS through io_uring, O_DIRECT and rustls:
one file or many (-i LIST, -Z URL...), each over up to -x Range connections

Usage: ringdl [OPTIONS] URL [MIRROR-URL...]
       ringdl [OPTIONS] -Z URL...          (each URL its own file)
       ringdl [OPTIONS] -i LIST            (the files of a list)

More than one URL: mirrors of one file (as aria2c takes them). Connections are spread
over them; the first URL names the output; a mirror whose size or validator (ETag, else
Last-Modified; any validator with --checksum) differs from the first that answers, or
that fails, is dropped with a note. See docs/guide/mirrors.md.

Several files (up to -j at once; the options below apply to each):
  -i, --input-file FILE     fetch the files listed in FILE ('-' = standard input),
                            aria2c's format: a line of TAB-separated URLs (mirrors of one
                            file), then indented key=value lines for that file: out=,
                            dir=, checksum=ALG=HEX, header=, connections=; # comments
  -Z, --force-sequential    each URL on the command line is its own file (without -Z,
                            several URLs are mirrors of one file)
  -d, --dir DIR             where names without a directory go (created if missing)
  -j, --max-concurrent-downloads N
                            files in flight at once, 1-64 (default 5, as aria2c);
                            their connections count together against
                            --max-connections-per-host
      --fail-fast           stop at the first file that fails (default: fetch the
                            others, exit with the first failure's code)

Output:
  -o, --output FILE         write to FILE ('-' = standard output); default: the URL's
                            last path segment in the current directory
      --force               replace FILE if it exists
  -c, --continue            resume FILE.part from its control file (FILE.part.ringdl);
                            without -c ringdl resumes too when that control file is
                            there, and starts over when it is not valid
      --no-continue         start over even when FILE.part can be resumed (so does
                            --force)
      --content-disposition name the file from Content-Disposition (base name only)
      --checksum ALG=HEX    verify sha-256 or sha-512 (also sha256, sha512) before the
                            rename
      --checksum-file FILE  take the digest from a SHA256SUMS / SHA512SUMS file: the line
                            for the output's file name (or the URL's); none = error
                            before the download
      --signature FILE|URL  a detached signature (SSHSIG from ssh-keygen -Y sign, signify
                            / usign, minisign) over the file, or over --checksum-file when
                            one is given; checked before the rename (exit 10 if it fails)
      --trusted-key FILE    a key the signature may come from (repeatable): an OpenSSH
                            public key or allowed-signers file, a signify or minisign .pub
      --signature-namespace NAME
                            the SSHSIG namespace to require (default file)

      --etag-compare FILE   send the ETag saved in FILE as If-None-Match while the
                            output is there; 304 Not Modified leaves it untouched
                            (checked against --checksum, --signature) and exits 0
                            (a missing or empty FILE: no condition)
      --etag-save FILE      when the file has landed, save its ETag in FILE
  -N, --timestamping        send If-Modified-Since from the output's modification
                            time; set that time from Last-Modified when it lands
      --offset BYTES        block-device output: write the image at this offset (a
                            multiple of the logical block size)
      --control FILE        block-device output: keep the control file for -c here

Delta updates (see docs/guide/delta.md):
      --seed PATH           a file or block device (the active slot, the last image)
                            that likely shares most of the target (repeatable): URL is
                            a zchunk file (*.zck, made by zck -u; the target is its
                            uncompressed content) or a zsync control file (*.zsync);
                            only the pieces no seed holds are fetched by Range, each
                            checked against the index before it is written; the
                            index's own --signature is checked before any piece
      --max-delta-bytes N|P%
                            refuse (exit 11) a delta that would fetch more than N bytes
                            (50M) or P percent of a full download
      --allow-full          a server without ranges: fetch the whole file instead of
                            failing (exit 11)

Connections and I/O:
  -x, --connections N       concurrent Range connections, 1-64 (default 4)
      --threads N|auto      reactors on N threads, each with its own ring, buffers
                            and connections, sharing a file's ranges; -x (and
                            --max-connections-per-host) is shared out over them, so
                            a file spreads over at most -x; only a regular file from one
                            URL served in ranges spreads (not -o -, FIFOs, devices,
                            mirrors, --limit-rate); a list at -j 2+ places whole
                            files on them instead (-j shared over them; a large file
                            left alone starts again from what landed, spread);
                            auto: the CPUs the process may use; 1-64 (default 1)
      --pin                 each reactor's thread on its own CPU of those the
                            process may use (sched_setaffinity); off by default
      --min-split-size SIZE open one connection per SIZE bytes still to fetch, up to
                            -x: the first connection alone learns the size; 512K, 4M,
                            1G (powers of 1024; 4K to 1G; default 4M)
      --max-connections-per-host N
                            most connections open at once to one server (scheme,
                            host, port, proxy), over its mirrors and the files in
                            flight, 1-64 (default 16); a
                            server's own cap, learned from a 503, holds for the
                            run's later files too
      --engine NAME         auto | direct | buffered | splice | ktls-direct (default auto:
                            ktls-direct when the kernel has kTLS, else direct)
      --io NAME             auto | uring | epoll (default auto: io_uring, epoll where
                            io_uring is refused, e.g. by a container's seccomp profile)
      --sqpoll              io_uring: a kernel thread polls the submission queue
                            (IORING_SETUP_SQPOLL, Linux 5.13+ unprivileged): fewer
                            syscalls, one more busy core while data flows; not with
                            --io epoll (docs/design.md \"Copy budget\" has the costs)
      --limit-rate RATE     most bytes/s for the whole download (all connections):
                            500K, 10M, 1G (powers of 1024); default: no limit
      --buf-size BYTES      splice: most bytes per socket->pipe SPLICE (default 1048576)
      --write-threshold B   splice: bytes held in the pipe before writing (default 1048576)

Network:
      --proxy URL           proxy: [SCHEME://][user:password@]host[:port] (port
                            default 1080). SCHEME http (default; https goes through
                            a CONNECT tunnel), socks5 (SOCKS5, names resolved here)
                            or socks5h (the proxy resolves them); \"\" = none.
                            Default: the environment, as curl reads it (https_proxy,
                            http_proxy, all_proxy; upper case too, except HTTP_PROXY)
      --proxy-user USER:PASSWORD
                            the proxy's credentials (HTTP Basic, or SOCKS5 username/
                            password), apart from the proxy URL (over its
                            user:password@); never printed
      --noproxy LIST        hosts that go direct: comma-separated names (suffix
                            match), IP addresses, CIDR networks, or '*'; default
                            no_proxy / NO_PROXY
      --resolve HOST:PORT:ADDR[,ADDR...]
                            connect to these addresses for HOST:PORT, not the resolver's
                            (repeatable; the name still goes in Host, SNI and the check)
      --connect-timeout S   seconds to wait for a TCP connect, fractions allowed (default 30)
      --stall-timeout S     reset a connection that moves no byte for S seconds, fractions
                            allowed (default 60)
      --max-tries N         attempts per segment before giving up (default 5)
      --retry-wait S        first wait before a retry in seconds, doubled per try, at
                            most 30 (default 0.5)
      --max-redirects N     redirects to follow (default 10)
      --allow-downgrade     follow a redirect from https to http

Request:
  -H, --header 'NAME: VALUE'
                            send this request header (repeatable); 'NAME:' with no value
                            removes User-Agent or Accept. Authorization and Cookie go only
                            to the URL's origin, never after a redirect to another one
  -A, --user-agent STR      User-Agent to send (default ringdl/VERSION; '' sends none)
  -u, --user USER:PASSWORD  Basic authentication (also from https://USER:PASSWORD@host/,
                            percent-decoded); sent only to the URL's origin

TLS:
  -k, --insecure            do not verify the server certificate (prints a warning)
      --ca-certificate FILE trust the PEM certificates in FILE as well
      --pinnedpubkey sha256//BASE64[;sha256//BASE64...]
                            the server key must have one of these SHA-256 hashes
                            (SubjectPublicKeyInfo); checked with -k too

Reporting:
  -q, --quiet               no progress line, no summary
  -v, --verbose             say more (engine choice, segments, retries); repeat for more
      --json FILE           at the end, success or failure, write one JSON object (size,
                            bytes fetched, seconds, rate, engine, TLS, connections, retries,
                            redirects, checksum, exit code, error) to FILE ('-' = standard
                            output, when the data goes to a file)
  -h, --help                print this help
  -V, --version             print the version

Trust: bundled Mozilla roots (webpki-roots), plus SSL_CERT_FILE and SSL_CERT_DIR,
plus --ca-certificate (CAs, or the server's own certificate). The host name is checked
against the certificate's names whatever the anchor; only -k skips it.

Exit status: 0 ok, 1 internal error, 2 usage, 3 network, 4 TLS, 5 HTTP status,
6 protocol violation, 7 local I/O, 8 interrupted, 9 checksum mismatch,
10 signature not verified, 11 a delta refused (--max-delta-bytes, no ranges).
The manual: man ./ringdl.1 (in the source tree).
";
