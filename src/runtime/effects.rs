//! What a known program does, by its arguments: the files it writes,
//! deletes or changes the permissions of, whether it changes privileges,
//! the system or version-control history, and whether it only reads.
//!
//! Pure tables over the words [`super::command`] found. A program not named
//! here has no known effects (it is a project tool such as `cargo` or
//! `make`, confined by the sandbox when that is on); `read_only` is true
//! only for programs known to change nothing.

use super::command::Word;

/// What one command does, as far as its words tell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Files or dirs it creates, replaces or changes (absolute, or
    /// [`super::command::UNKNOWN`] + text).
    pub writes: Vec<String>,
    /// Files or dirs it removes (or moves away).
    pub deletes: Vec<String>,
    /// Files whose mode, owner or attributes it changes.
    pub perms: Vec<String>,
    /// It runs something as another user (`sudo`, `su`, `doas`, ...).
    pub privilege: bool,
    /// It changes the machine beyond files: disks, packages, services,
    /// users, schedules. The text says how.
    pub system: Option<String>,
    /// It rewrites version-control history or throws work away.
    pub history: Option<String>,
    /// It only reads (and prints).
    pub read_only: bool,
}

/// Programs that run something as another user.
pub const PRIVILEGE: &[&str] = &[
    "sudo", "su", "doas", "pkexec", "run0", "runuser", "sudoedit", "setpriv", "newgrp", "sg",
    "chroot", "nsenter", "unshare", "capsh",
];

/// Programs that only read and print, whatever their (option) arguments.
const READ_ONLY: &[&str] = &[
    "ls",
    "ll",
    "dir",
    "cat",
    "tac",
    "head",
    "tail",
    "less",
    "more",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "wc",
    "file",
    "stat",
    "du",
    "df",
    "pwd",
    "echo",
    "printf",
    "true",
    "false",
    "which",
    "whereis",
    "type",
    "tree",
    "diff",
    "cmp",
    "comm",
    "cut",
    "tr",
    "nl",
    "od",
    "hexdump",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "date",
    "printenv",
    "id",
    "whoami",
    "groups",
    "uname",
    "ps",
    "pgrep",
    "free",
    "uptime",
    "test",
    "[",
    "[[",
    "sleep",
    "seq",
    "column",
    "fold",
    "fmt",
    "expand",
    "unexpand",
    "paste",
    "join",
    "rev",
    "strings",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "man",
    "help",
    "info",
    "nproc",
    "arch",
    "locale",
    "getconf",
    "cd",
    "pushd",
    "popd",
    "jq",
    "yq",
    "lsof",
    "env",
    "command",
    "hash",
    "wait",
    "exit",
    "return",
    "set",
    "shopt",
    "export",
    "unset",
    "local",
    "declare",
    "typeset",
    "readonly",
    "read",
    "alias",
    "history",
    "jobs",
    "fg",
    "bg",
    "times",
    "umask",
    "ulimit",
    "dirs",
    "hostname",
    "tty",
    "look",
    "zcat",
    "zgrep",
    "bzcat",
    "xzcat",
    "lscpu",
    "lsblk",
    "whatis",
    "apropos",
    "cal",
    "bc",
    "expr",
    "factor",
];

/// Interpreters besides shells: inline code (`-c`, `-e`) and code from a
/// pipe are opaque.
pub fn interpreter(name: &str) -> bool {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    matches!(
        base,
        "python"
            | "pypy"
            | "perl"
            | "ruby"
            | "node"
            | "nodejs"
            | "deno"
            | "bun"
            | "php"
            | "lua"
            | "luajit"
            | "Rscript"
            | "pwsh"
            | "powershell"
            | "osascript"
            | "tclsh"
            | "wish"
            | "expect"
            | "irb"
            | "jshell"
            | "ghci"
            | "julia"
            | "scala"
            | "groovy"
    )
}

/// Options of one program: its operands (non-option words), the values of
/// options that take one, and its flags (short bundles split: `-rf` gives
/// `-r` and `-f`).
struct Opts<'a> {
    operands: Vec<&'a Word>,
    values: Vec<(String, Word)>,
    flags: Vec<String>,
}

impl Opts<'_> {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    fn value(&self, opt: &str) -> Option<&Word> {
        self.values.iter().find(|(o, _)| o == opt).map(|(_, v)| v)
    }
    fn values_of<'s>(&'s self, opts: &'s [&str]) -> impl Iterator<Item = &'s Word> + 's {
        self.values
            .iter()
            .filter(move |(o, _)| opts.contains(&o.as_str()))
            .map(|(_, v)| v)
    }
}

fn opts<'a>(args: &'a [Word], takes_value: &[&str]) -> Opts<'a> {
    let mut o = Opts {
        operands: Vec::new(),
        values: Vec::new(),
        flags: Vec::new(),
    };
    let mut i = 0;
    let mut only_operands = false;
    while i < args.len() {
        let w = &args[i];
        let t = w.text.as_str();
        i += 1;
        if only_operands || !w.is_static || !t.starts_with('-') || t == "-" {
            o.operands.push(w);
            continue;
        }
        if t == "--" {
            only_operands = true;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            if let Some((name, value)) = long.split_once('=') {
                o.values.push((
                    format!("--{name}"),
                    Word {
                        text: value.to_string(),
                        is_static: w.is_static,
                        glob: w.glob,
                    },
                ));
                o.flags.push(format!("--{name}"));
            } else if takes_value.contains(&t) {
                if let Some(v) = args.get(i) {
                    o.values.push((t.to_string(), v.clone()));
                    i += 1;
                }
                o.flags.push(t.to_string());
            } else {
                o.flags.push(t.to_string());
            }
            continue;
        }
        // A short bundle: `-rf`, `-o file`, `-ofile`, `-sLo file`.
        let chars: Vec<char> = t.chars().skip(1).collect();
        for (k, c) in chars.iter().enumerate() {
            let flag = format!("-{c}");
            o.flags.push(flag.clone());
            if takes_value.contains(&flag.as_str()) {
                let rest: String = chars[k + 1..].iter().collect();
                if rest.is_empty() {
                    if let Some(v) = args.get(i) {
                        o.values.push((flag, v.clone()));
                        i += 1;
                    }
                } else {
                    o.values.push((
                        flag,
                        Word {
                            text: rest,
                            is_static: true,
                            glob: w.glob,
                        },
                    ));
                }
                break;
            }
        }
    }
    o
}

// One arm per program reads better than guards folded into the patterns.
#[allow(clippy::collapsible_match)]
/// Classifies one command. `resolve` turns a word into an absolute path (or
/// an unknown marker). Returns the effects and, when the program itself
/// makes what runs unknowable (`sed`'s `e` command, `git -c alias.x=!sh`),
/// the reason.
pub fn classify(
    program: &str,
    args: &[Word],
    resolve: &dyn Fn(&Word) -> String,
) -> (Effects, Option<String>) {
    let mut e = Effects::default();
    let mut opaque = None;
    let paths = |words: &[&Word]| -> Vec<String> { words.iter().map(|w| resolve(w)).collect() };
    match program {
        "rm" | "rmdir" | "unlink" | "shred" | "srm" | "trash" | "trash-put" | "wipe" => {
            let o = opts(
                args,
                &["-n", "--iterations", "-s", "--size", "--random-source"],
            );
            e.deletes = paths(&o.operands);
        }
        "mv" => {
            let o = opts(args, &["-t", "--target-directory", "-S", "--suffix"]);
            match o.value("-t").or(o.value("--target-directory")) {
                Some(dir) => {
                    e.deletes = paths(&o.operands);
                    e.writes.push(resolve(dir));
                }
                None => {
                    if let Some((last, sources)) = o.operands.split_last() {
                        e.deletes = paths(sources);
                        e.writes.push(resolve(last));
                    }
                }
            }
        }
        "cp" | "install" | "rsync" | "scp" => {
            let o = opts(
                args,
                &[
                    "-t",
                    "--target-directory",
                    "-S",
                    "--suffix",
                    "-m",
                    "--mode",
                    "-o",
                    "--owner",
                    "-g",
                    "--group",
                    "-e",
                    "--rsh",
                    "-i",
                    "-P",
                    "-F",
                    "-c",
                    "-l",
                    "-J",
                ],
            );
            let local =
                |w: &&&Word| !(program == "rsync" || program == "scp") || !w.text.contains(':');
            if program == "install" && o.has("-d") {
                e.writes = paths(&o.operands);
            } else if let Some(dir) = o.value("-t").or(o.value("--target-directory")) {
                e.writes.push(resolve(dir));
            } else if let Some(last) = o.operands.last().filter(local) {
                if o.operands.len() >= 2 {
                    e.writes.push(resolve(last));
                }
            }
            if program == "rsync"
                && o.flags
                    .iter()
                    .any(|f| f.starts_with("--delete") || f.starts_with("--remove-source"))
            {
                e.deletes = e.writes.clone();
            }
        }
        "ln" | "link" => {
            let o = opts(args, &["-t", "--target-directory", "-S", "--suffix"]);
            let symbolic = o.has("-s") || o.has("--symbolic");
            let (targets, link): (Vec<&Word>, Option<String>) =
                match o.value("-t").or(o.value("--target-directory")) {
                    Some(dir) => (o.operands.clone(), Some(resolve(dir))),
                    None if o.operands.len() >= 2 => {
                        let (last, rest) = o
                            .operands
                            .split_last()
                            .map(|(l, r)| (*l, r.to_vec()))
                            .unwrap_or((o.operands[0], Vec::new()));
                        (rest, Some(resolve(last)))
                    }
                    None => (
                        o.operands.clone(),
                        Some(resolve(&Word {
                            text: ".".into(),
                            is_static: true,
                            glob: false,
                        })),
                    ),
                };
            e.writes.extend(link);
            if symbolic {
                // A link inside the workspace to a place outside it is a
                // way out for every later write through it.
                e.writes.extend(targets.iter().map(|t| resolve(t)));
            }
        }
        "touch" | "mkdir" | "mkfifo" | "truncate" | "tee" | "mktemp" => {
            let o = opts(
                args,
                &[
                    "-d",
                    "--date",
                    "-r",
                    "--reference",
                    "-t",
                    "-m",
                    "--mode",
                    "-s",
                    "--size",
                    "-p",
                    "--tmpdir",
                    "-o",
                    "--io-blocks",
                ],
            );
            if program == "mktemp" {
                if let Some(dir) = o.value("-p").or(o.value("--tmpdir")) {
                    e.writes.push(resolve(dir));
                }
            } else {
                e.writes = paths(&o.operands);
            }
        }
        "mknod" => {
            let o = opts(args, &["-m", "--mode"]);
            e.writes = paths(&o.operands[..o.operands.len().min(1)]);
        }
        "dd" => {
            for a in args {
                if let Some(path) = a.text.strip_prefix("of=") {
                    let word = Word {
                        text: path.to_string(),
                        ..a.clone()
                    };
                    let p = resolve(&word);
                    if p.starts_with("/dev/") && !is_sink(&p) {
                        e.system = Some(format!("it writes to the device {p}"));
                    }
                    e.writes.push(p);
                }
            }
        }
        "chmod" | "chown" | "chgrp" | "chattr" | "setfacl" | "chcon" => {
            let values: &[&str] = if program == "setfacl" {
                &["-m", "-x", "-M", "-X", "--modify", "--remove", "--set"]
            } else {
                &["--reference"]
            };
            let o = opts(args, values);
            let skip = usize::from(!(o.value("--reference").is_some() || program == "setfacl"));
            // `chmod -x file`: a mode that looks like an option.
            let mode_as_flag =
                program == "chmod" && args.iter().any(|a| is_chmod_mode_flag(&a.text));
            let skip = if mode_as_flag { 0 } else { skip };
            e.perms = paths(o.operands.get(skip..).unwrap_or(&[]));
        }
        "sed" | "gsed" => {
            let o = opts(
                args,
                &["-e", "--expression", "-f", "--file", "-l", "--line-length"],
            );
            let in_place = o
                .flags
                .iter()
                .any(|f| f == "-i" || f.starts_with("--in-place"))
                || args
                    .iter()
                    .any(|a| a.text.starts_with("-i") && !a.text.starts_with("--"));
            let mut scripts: Vec<&Word> = o.values_of(&["-e", "--expression"]).collect();
            let mut files = o.operands.clone();
            if scripts.is_empty()
                && o.value("-f").is_none()
                && o.value("--file").is_none()
                && !files.is_empty()
            {
                scripts.push(files.remove(0));
            }
            for s in &scripts {
                match sed_script_risk(&s.text) {
                    SedRisk::None => {}
                    SedRisk::Runs => {
                        opaque = Some(
                            "its `sed` script runs shell commands (the `e` command or flag)"
                                .to_string(),
                        )
                    }
                    SedRisk::Writes => e.writes.push(format!("{}sed w", super::command::UNKNOWN)),
                }
                if !s.is_static {
                    opaque = Some("its `sed` script is built at run time".to_string());
                }
            }
            if in_place {
                e.writes.extend(paths(&files));
            } else if opaque.is_none() && e.writes.is_empty() {
                e.read_only = true;
            }
        }
        "awk" | "gawk" | "mawk" | "nawk" => {
            let o = opts(
                args,
                &["-f", "-v", "-F", "--file", "--assign", "--field-separator"],
            );
            let text = o.operands.first().map(|w| w.text.as_str()).unwrap_or("");
            if text.contains("system") || text.contains('|') || text.contains("getline") {
                opaque = Some(format!("its `{program}` program can run commands"));
            } else if text.contains('>') && text.contains("print") {
                e.writes
                    .push(format!("{}{program} output", super::command::UNKNOWN));
            } else if o.value("-f").is_none() {
                e.read_only = true;
            }
        }
        "sort" | "uniq" | "xxd" | "base64" | "split" | "csplit" => {
            let o = opts(
                args,
                &[
                    "-o", "--output", "-k", "-t", "-S", "-T", "-f", "-s", "-w", "-c", "-n", "-l",
                    "-b", "-C", "-a",
                ],
            );
            if let Some(out) = o.value("-o").or(o.value("--output")) {
                e.writes.push(resolve(out));
            }
            match program {
                "uniq" | "xxd" if o.operands.len() >= 2 => e.writes.push(resolve(o.operands[1])),
                "split" | "csplit" => e.writes.push(resolve(&Word {
                    text: ".".into(),
                    is_static: true,
                    glob: false,
                })),
                _ => {}
            }
            e.read_only = e.writes.is_empty();
        }
        "find" => {
            let roots: Vec<&Word> = args
                .iter()
                .take_while(|a| !a.text.starts_with('-') && a.text != "(" && a.text != "!")
                .collect();
            let roots = if roots.is_empty() {
                vec![Word {
                    text: ".".into(),
                    is_static: true,
                    glob: false,
                }]
            } else {
                roots.into_iter().cloned().collect()
            };
            if args.iter().any(|a| a.text == "-delete") {
                // What it deletes is below its roots.
                e.deletes = roots
                    .iter()
                    .map(|r| format!("{}/*", resolve(r).trim_end_matches('/')))
                    .collect();
            }
            for (i, a) in args.iter().enumerate() {
                if matches!(
                    a.text.as_str(),
                    "-fprint" | "-fprint0" | "-fprintf" | "-fls"
                ) {
                    if let Some(f) = args.get(i + 1) {
                        e.writes.push(resolve(f));
                    }
                }
            }
            e.read_only = e.deletes.is_empty()
                && e.writes.is_empty()
                && !args
                    .iter()
                    .any(|a| a.text.starts_with("-exec") || a.text.starts_with("-ok"));
        }
        "curl" => {
            let o = opts(
                args,
                &[
                    "-o",
                    "--output",
                    "-D",
                    "--dump-header",
                    "-c",
                    "--cookie-jar",
                    "--output-dir",
                    "-H",
                    "-d",
                    "-X",
                    "-u",
                    "-A",
                    "-e",
                    "-b",
                    "-F",
                    "-m",
                    "-x",
                    "-w",
                    "-T",
                    "-K",
                    "-r",
                    "-C",
                    "-E",
                    "-y",
                    "-Y",
                    "-z",
                    "-Q",
                    "-t",
                    "--data",
                    "--header",
                    "--request",
                    "--user",
                    "--url",
                ],
            );
            for w in o.values_of(&[
                "-o",
                "--output",
                "-D",
                "--dump-header",
                "-c",
                "--cookie-jar",
                "--output-dir",
            ]) {
                if w.text != "-" {
                    e.writes.push(resolve(w));
                }
            }
            if o.has("-O") || o.has("--remote-name") || o.has("--remote-name-all") {
                e.writes.push(resolve(&Word {
                    text: ".".into(),
                    is_static: true,
                    glob: false,
                }));
            }
        }
        "wget" => {
            let o = opts(
                args,
                &[
                    "-O",
                    "--output-document",
                    "-P",
                    "--directory-prefix",
                    "-o",
                    "--output-file",
                    "-a",
                    "--append-output",
                    "-t",
                    "-T",
                    "-U",
                    "-e",
                    "--header",
                ],
            );
            match o.value("-O").or(o.value("--output-document")) {
                Some(w) if w.text == "-" => {}
                Some(w) => e.writes.push(resolve(w)),
                None => {
                    let dir = o
                        .value("-P")
                        .or(o.value("--directory-prefix"))
                        .cloned()
                        .unwrap_or(Word {
                            text: ".".into(),
                            is_static: true,
                            glob: false,
                        });
                    e.writes.push(resolve(&dir));
                }
            }
            for w in o.values_of(&["-o", "--output-file", "-a", "--append-output"]) {
                e.writes.push(resolve(w));
            }
        }
        "tar" | "bsdtar" | "unzip" | "7z" | "gunzip" | "bunzip2" | "unxz" => {
            let mut words: Vec<Word> = args.to_vec();
            // `tar xzf a.tgz`: the first word is a bundle without a dash.
            if program == "tar" {
                if let Some(first) = words.first_mut() {
                    if !first.text.starts_with('-') {
                        first.text = format!("-{}", first.text);
                    }
                }
            }
            let o = opts(
                &words,
                &[
                    "-f",
                    "--file",
                    "-C",
                    "--directory",
                    "-d",
                    "-T",
                    "-X",
                    "--exclude",
                    "-b",
                    "-o",
                ],
            );
            let extracts = program != "tar" || o.has("-x") || o.has("--extract") || o.has("--get");
            let dir = o
                .value("-C")
                .or(o.value("--directory"))
                .or(if program == "unzip" {
                    o.value("-d")
                } else {
                    None
                })
                .cloned();
            if extracts && !o.has("-t") && !o.has("-l") && !o.has("--list") {
                e.writes.push(resolve(&dir.unwrap_or(Word {
                    text: ".".into(),
                    is_static: true,
                    glob: false,
                })));
            } else if o.has("-c") || o.has("--create") || o.has("-r") || o.has("-u") {
                if let Some(f) = o.value("-f").or(o.value("--file")) {
                    e.writes.push(resolve(f));
                }
            } else {
                e.read_only = true;
            }
        }
        "git" => git(args, resolve, &mut e, &mut opaque),
        "crontab" => {
            if !args.iter().all(|a| {
                a.text == "-l"
                    || a.text == "-u"
                    || !a.text.starts_with('-') && args.iter().any(|b| b.text == "-u")
            }) || args.is_empty()
            {
                e.system = Some("it changes your scheduled jobs (crontab)".into());
            }
        }
        "at" | "batch" | "launchctl" | "schtasks" => {
            e.system = Some(format!("it schedules or starts jobs ({program})"));
        }
        "systemctl" | "service" | "rc-service" => {
            let verb = args
                .iter()
                .find(|a| !a.text.starts_with('-'))
                .map(|a| a.text.as_str())
                .unwrap_or("");
            let looks = matches!(
                verb,
                "status"
                    | "show"
                    | "cat"
                    | "is-active"
                    | "is-enabled"
                    | "is-failed"
                    | "list-units"
                    | "list-unit-files"
                    | "list-timers"
                    | "help"
                    | ""
            );
            if looks {
                e.read_only = true;
            } else {
                e.system = Some(format!("it changes system services ({program} {verb})"));
            }
        }
        "apt" | "apt-get" | "aptitude" | "dpkg" | "yum" | "dnf" | "rpm" | "pacman" | "zypper"
        | "apk" | "snap" | "flatpak" | "brew" | "port" | "emerge" | "nix-env" => {
            let verb = args
                .iter()
                .find(|a| !a.text.starts_with('-'))
                .map(|a| a.text.as_str())
                .unwrap_or("");
            let reads = matches!(
                verb,
                "search"
                    | "show"
                    | "list"
                    | "info"
                    | "policy"
                    | "depends"
                    | "rdepends"
                    | "query"
                    | "-l"
                    | "-s"
                    | "-L"
            );
            let dpkg_reads = program == "dpkg"
                && args.iter().all(|a| {
                    matches!(
                        a.text.as_str(),
                        "-l" | "-L" | "-s" | "-S" | "--list" | "--status" | "--search"
                    ) || !a.text.starts_with('-')
                });
            if reads || dpkg_reads && !args.is_empty() {
                e.read_only = true;
            } else {
                e.system = Some(format!(
                    "it installs or removes system packages ({program})"
                ));
            }
        }
        "npm" | "pnpm" | "yarn" | "bun" => {
            let global = args
                .iter()
                .any(|a| matches!(a.text.as_str(), "-g" | "--global" | "--location=global"))
                || (program == "yarn" && args.first().is_some_and(|a| a.text == "global"));
            if global {
                e.system = Some(format!("it installs packages globally ({program} -g)"));
            }
        }
        "docker" | "podman" | "nerdctl" => {
            let sub = args
                .iter()
                .find(|a| !a.text.starts_with('-'))
                .map(|a| a.text.as_str());
            if matches!(sub, Some("run" | "create" | "exec")) {
                let o = opts(
                    args,
                    &[
                        "-v",
                        "--volume",
                        "--mount",
                        "-e",
                        "--env",
                        "-w",
                        "--workdir",
                        "--name",
                        "-p",
                        "--publish",
                        "-u",
                        "--user",
                        "--entrypoint",
                        "--network",
                        "--net",
                        "--pid",
                        "--platform",
                        "-l",
                        "--label",
                        "--env-file",
                    ],
                );
                let host_wide = o.has("--privileged")
                    || o.values_of(&["--pid", "--network", "--net", "--ipc", "--userns"])
                        .any(|v| v.text == "host")
                    || o.flags
                        .iter()
                        .any(|f| f == "--pid=host" || f == "--cap-add");
                if host_wide {
                    e.system = Some(format!(
                        "it runs a container with the host's privileges ({program} --privileged or host namespaces)"
                    ));
                }
                for v in o.values_of(&["-v", "--volume"]) {
                    let src = v.text.split(':').next().unwrap_or("");
                    if !v.is_static || src.starts_with(['/', '~', '.']) {
                        let word = Word {
                            text: src.to_string(),
                            ..v.clone()
                        };
                        e.writes.push(resolve(&word));
                    }
                }
                for m in o.values_of(&["--mount"]) {
                    for part in m.text.split(',') {
                        if let Some(src) =
                            part.strip_prefix("source=").or(part.strip_prefix("src="))
                        {
                            let word = Word {
                                text: src.to_string(),
                                ..m.clone()
                            };
                            e.writes.push(resolve(&word));
                        }
                    }
                }
            } else if matches!(
                sub,
                Some("ps" | "images" | "logs" | "inspect" | "version" | "info")
            ) {
                e.read_only = true;
            }
        }
        "cargo" => {
            if args
                .first()
                .is_some_and(|a| a.text == "install" || a.text == "uninstall")
            {
                e.system =
                    Some("it installs a program outside the workspace (cargo install)".into());
            }
        }
        "mkfs" | "mkswap" | "fdisk" | "sfdisk" | "gdisk" | "sgdisk" | "cfdisk" | "parted"
        | "wipefs" | "mount" | "umount" | "swapon" | "swapoff" | "losetup" | "cryptsetup"
        | "blkdiscard" | "hdparm" | "badblocks" | "e2fsck" | "fsck" | "tune2fs" | "resize2fs"
        | "lvremove" | "vgremove" | "pvremove" | "mdadm" | "zpool" | "zfs" => {
            e.system = Some(format!("it changes disks or filesystems ({program})"));
        }
        "shutdown" | "reboot" | "halt" | "poweroff" | "init" | "telinit" | "kexec" => {
            e.system = Some(format!(
                "it shuts the machine down or restarts it ({program})"
            ));
        }
        "useradd" | "userdel" | "usermod" | "groupadd" | "groupdel" | "groupmod" | "passwd"
        | "chpasswd" | "chsh" | "chfn" | "visudo" | "gpasswd" | "adduser" | "deluser" => {
            e.system = Some(format!("it changes users or passwords ({program})"));
        }
        "iptables"
        | "ip6tables"
        | "nft"
        | "ufw"
        | "firewall-cmd"
        | "modprobe"
        | "insmod"
        | "rmmod"
        | "sysctl"
        | "setenforce"
        | "update-alternatives"
        | "ldconfig" => {
            if !(program == "sysctl"
                && args.iter().all(|a| !a.text.contains('=') && a.text != "-w"))
            {
                e.system = Some(format!("it changes system settings ({program})"));
            } else {
                e.read_only = true;
            }
        }
        "kill" | "pkill" | "killall" => {
            if args.iter().any(|a| {
                a.text == "-1" && args.len() == 1
                    || a.text == "1"
                    || a.text == "-9" && args.iter().any(|b| b.text == "-1")
            }) {
                e.system = Some("it kills every process it can (kill -1) or init".into());
            }
        }
        _ => {}
    }
    if program.starts_with("mkfs.") {
        e.system = Some(format!("it formats a filesystem ({program})"));
    }
    if PRIVILEGE.contains(&program) {
        e.privilege = true;
    }
    // `env CMD` was unwrapped before; `env` here has only assignments.
    let bare_env = program != "env" || args.is_empty();
    if READ_ONLY.contains(&program) && e.writes.is_empty() && bare_env {
        e.read_only = true;
    }
    (e, opaque)
}

/// `chmod -x file` and friends: a mode, not an option.
fn is_chmod_mode_flag(t: &str) -> bool {
    t.strip_prefix('-')
        .is_some_and(|m| !m.is_empty() && m.chars().all(|c| "rwxXst".contains(c)))
}

/// Files that are not really written: discarding or terminal output.
pub fn is_sink(path: &str) -> bool {
    matches!(
        path,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty" | "/dev/zero"
    ) || path.starts_with("/dev/fd/")
        || path.starts_with("/proc/self/fd/")
}

enum SedRisk {
    None,
    Runs,
    Writes,
}

/// Looks for `sed` commands that run a shell (`e`, the `e` flag of `s`) or
/// write files (`w`, `W`, the `w` flag of `s`). Errs towards risk.
fn sed_script_risk(script: &str) -> SedRisk {
    let mut risk = SedRisk::None;
    for part in script.split(['\n', ';']) {
        let mut s = part.trim_start();
        // Strip an address: numbers, `$`, `/re/`, ranges, `!`.
        loop {
            let before = s.len();
            s = s.trim_start_matches(|c: char| c.is_ascii_digit() || "$,!~+ ".contains(c));
            if let Some(rest) = s.strip_prefix('/') {
                match rest.find('/') {
                    Some(end) => s = rest.get(end + 1..).unwrap_or_default(),
                    None => break,
                }
            }
            if s.len() == before {
                break;
            }
        }
        let mut chars = s.chars();
        match chars.next() {
            Some('e') => return SedRisk::Runs,
            Some('w' | 'W') => risk = SedRisk::Writes,
            Some('s') => {
                let Some(delim) = chars.next() else { continue };
                let rest: String = chars.collect();
                let mut seen = 0;
                let mut escaped = false;
                let mut flags = String::new();
                for c in rest.chars() {
                    if seen >= 2 {
                        flags.push(c);
                        continue;
                    }
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == delim {
                        seen += 1;
                    }
                }
                let flags = flags.trim();
                let flag_part: String = flags.chars().take_while(|c| !c.is_whitespace()).collect();
                if flag_part.contains('e') {
                    return SedRisk::Runs;
                }
                if flag_part.contains('w') {
                    risk = SedRisk::Writes;
                }
            }
            _ => {}
        }
    }
    risk
}

/// `git -c` keys that are only cosmetic or identity; any other key can make
/// git run a program (`alias.*`, `core.pager`, `core.sshCommand`, ...).
const GIT_SAFE_CONFIG: &[&str] = &[
    "user.name",
    "user.email",
    "color.ui",
    "init.defaultbranch",
    "core.quotepath",
    "advice.detachedhead",
    "commit.gpgsign",
    "tag.gpgsign",
    "pull.rebase",
    "push.autosetupremote",
    "safe.directory",
    "log.showsignature",
    "diff.noprefix",
    "core.autocrlf",
];

#[allow(clippy::collapsible_match)]
fn git(
    args: &[Word],
    resolve: &dyn Fn(&Word) -> String,
    e: &mut Effects,
    opaque: &mut Option<String>,
) {
    // Global options before the subcommand.
    let mut i = 0;
    let mut elsewhere: Option<String> = None;
    while i < args.len() {
        let t = args[i].text.as_str();
        match t {
            "-C" | "--git-dir" | "--work-tree" => {
                if let Some(dir) = args.get(i + 1) {
                    elsewhere = Some(resolve(dir));
                }
                i += 2;
            }
            "-c" => {
                if let Some(kv) = args.get(i + 1) {
                    check_git_config(&kv.text, kv.is_static, opaque);
                }
                i += 2;
            }
            "--exec-path" | "--namespace" | "--config-env" => i += 2,
            _ if t.starts_with("--git-dir=") || t.starts_with("--work-tree=") => {
                let dir = t.split_once('=').map(|(_, d)| d).unwrap_or("");
                elsewhere = Some(resolve(&Word {
                    text: dir.into(),
                    is_static: args[i].is_static,
                    glob: false,
                }));
                i += 1;
            }
            _ if t.starts_with("--config-env=") || t.starts_with("--exec-path=") => {
                *opaque = Some("it sets git's configuration or exec path from outside".into());
                i += 1;
            }
            _ if t.starts_with('-') => i += 1,
            _ => break,
        }
    }
    let Some(sub) = args.get(i) else {
        e.read_only = true;
        return;
    };
    let rest = &args[i + 1..];
    let sub = sub.text.as_str();
    // Options that take a value, per subcommand (`-u` is a flag of push).
    let values: &[&str] = match sub {
        "push" => &["-o", "--push-option", "--repo", "--receive-pack", "--exec"],
        "commit" => &[
            "-m",
            "--message",
            "-C",
            "-c",
            "-F",
            "--file",
            "--author",
            "--date",
            "-t",
            "--template",
        ],
        "checkout" | "switch" => &["-b", "-B", "-c", "-C", "--orphan"],
        "clone" => &[
            "-o",
            "--origin",
            "-b",
            "--branch",
            "--depth",
            "-c",
            "--config",
            "--reference",
            "-u",
            "--upload-pack",
            "--template",
            "--separate-git-dir",
        ],
        "branch" => &["-u", "--set-upstream-to"],
        "rebase" | "merge" | "pull" | "cherry-pick" | "revert" => &[
            "-X",
            "--strategy-option",
            "-s",
            "--strategy",
            "-m",
            "--onto",
        ],
        _ => &[],
    };
    let o = opts(rest, values);
    let words: Vec<&str> = rest.iter().map(|w| w.text.as_str()).collect();
    let has = |f: &str| o.has(f);
    match sub {
        "status" | "diff" | "log" | "show" | "rev-parse" | "ls-files" | "ls-tree" | "ls-remote"
        | "blame" | "grep" | "describe" | "shortlog" | "cat-file" | "show-ref" | "whatchanged"
        | "name-rev" | "merge-base" | "count-objects" | "help" | "version" | "rev-list"
        | "for-each-ref" | "check-ignore" | "var" | "fsck" | "verify-commit" | "show-branch"
        | "range-diff" | "difftool" => {
            e.read_only = true;
        }
        "branch" => {
            if has("-D")
                || (has("-d") && (has("-f") || has("--force")))
                || (has("--delete") && has("--force"))
            {
                e.history =
                    Some("it deletes a branch that may not be merged (git branch -D)".into());
            } else if o.operands.is_empty()
                || has("-a")
                || has("-r")
                || has("--list")
                || has("-v")
                || has("-vv")
            {
                e.read_only = !(has("-d") || has("-m") || has("-M") || has("-c") || has("-C"));
            }
        }
        "tag" => {
            if o.operands.is_empty() || has("-l") || has("--list") {
                e.read_only = true;
            }
        }
        "remote" => {
            if o.operands.is_empty()
                || matches!(words.first().copied(), Some("-v" | "show" | "get-url"))
            {
                e.read_only = true;
            }
        }
        "stash" => match words.first().copied() {
            Some("list" | "show") => e.read_only = true,
            Some("drop" | "clear") => {
                e.history = Some("it throws stashed work away (git stash drop/clear)".into())
            }
            _ => {}
        },
        "config" => {
            let setting = o.operands.len() >= 2
                || has("--add")
                || has("--replace-all")
                || has("--unset")
                || has("--edit")
                || has("-e");
            if setting {
                if let Some(key) = o.operands.first() {
                    check_git_config(&format!("{}=", key.text), key.is_static, opaque);
                }
            } else {
                e.read_only = true;
            }
        }
        "push" => {
            let force =
                has("-f") || o.flags.iter().any(|f| f.starts_with("--force")) || has("--mirror");
            let plus = o.operands.iter().skip(1).any(|w| w.text.starts_with('+'));
            let delete = has("-d")
                || has("--delete")
                || o.operands.iter().skip(1).any(|w| w.text.starts_with(':'))
                || has("--prune");
            if force || plus {
                e.history =
                    Some("it force-pushes, which can overwrite other people's commits".into());
            } else if delete {
                e.history = Some("it deletes branches or tags on the remote".into());
            }
        }
        "filter-branch" | "filter-repo" | "replace" => {
            e.history = Some(format!("it rewrites the repository's history (git {sub})"));
        }
        "reset" if has("--hard") || has("--merge") || has("--keep") => {
            e.history = Some("it throws uncommitted work away (git reset --hard)".into());
        }
        "clean" if has("-f") || has("--force") => {
            e.history = Some("it deletes untracked files for good (git clean -f)".into());
        }
        "rebase" if !(has("--abort") || has("--continue") || has("--skip") || has("--quit")) => {
            e.history = Some("it rewrites commits (git rebase)".into());
        }
        "reflog" if matches!(words.first().copied(), Some("expire" | "delete")) => {
            e.history =
                Some("it deletes the reflog, the record that lets lost work be found".into());
        }
        "update-ref" if has("-d") => {
            e.history = Some("it deletes a ref (git update-ref -d)".into());
        }
        "gc" | "prune" if o.flags.iter().any(|f| f.starts_with("--prune")) || sub == "prune" => {
            e.history = Some("it prunes unreachable commits for good".into());
        }
        "clone" => {
            let dest = o.operands.get(1).map(|w| resolve(w)).unwrap_or_else(|| {
                resolve(&Word {
                    text: ".".into(),
                    is_static: true,
                    glob: false,
                })
            });
            e.writes.push(dest);
        }
        _ => {}
    }
    if let Some(dir) = elsewhere {
        if !e.read_only {
            e.writes.push(dir);
        }
    }
}

fn check_git_config(kv: &str, is_static: bool, opaque: &mut Option<String>) {
    let key = kv.split('=').next().unwrap_or("").to_ascii_lowercase();
    if !is_static
        || !GIT_SAFE_CONFIG.contains(&key.as_str())
            && !key.starts_with("color.")
            && !key.starts_with("advice.")
    {
        *opaque = Some(format!(
            "it sets git's `{key}`, which can make git run another program"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Word> {
        s.split_whitespace()
            .map(|t| Word {
                text: t.into(),
                is_static: true,
                glob: false,
            })
            .collect()
    }

    fn fx(program: &str, args: &str) -> Effects {
        let resolve = |w: &Word| {
            if w.text.starts_with('/') {
                w.text.clone()
            } else {
                format!("/w/{}", w.text)
            }
        };
        classify(program, &words(args), &resolve).0
    }

    #[test]
    fn files_touched_by_known_programs() {
        assert_eq!(fx("rm", "-rf a /b").deletes, ["/w/a", "/b"]);
        let mv = fx("mv", "a b /c");
        assert_eq!(
            (mv.deletes, mv.writes),
            (
                vec!["/w/a".to_string(), "/w/b".into()],
                vec!["/c".to_string()]
            )
        );
        assert_eq!(fx("cp", "-r x /etc/y").writes, ["/etc/y"]);
        assert_eq!(fx("tee", "--append /h/.bashrc").writes, ["/h/.bashrc"]);
        assert_eq!(fx("tee", "-a out").writes, ["/w/out"]);
        assert_eq!(fx("sed", "-i s/a/b/ f.txt").writes, ["/w/f.txt"]);
        assert!(fx("sed", "-n 1,5p f.txt").read_only);
        assert_eq!(fx("chmod", "-R 777 /").perms, ["/"]);
        assert_eq!(fx("chmod", "-x f").perms, ["/w/f"]);
        assert_eq!(fx("chown", "root:root /etc/x").perms, ["/etc/x"]);
        assert_eq!(fx("dd", "if=/dev/zero of=/dev/sda").writes, ["/dev/sda"]);
        assert!(fx("dd", "if=/dev/zero of=/dev/sda").system.is_some());
        assert_eq!(
            fx("ln", "-sf /etc/passwd p").writes,
            ["/w/p", "/etc/passwd"]
        );
        assert_eq!(
            fx("curl", "-sLo out.json https://x").writes,
            ["/w/out.json"]
        );
        assert_eq!(fx("tar", "xzf a.tgz -C /").writes, ["/"]);
        assert!(fx("tar", "tzf a.tgz").read_only);
        assert_eq!(fx("find", "/ -delete").deletes, ["/*"]);
        assert_eq!(fx("find", ". -name x -delete").deletes, ["/w/./*"]);
        assert!(fx("find", ". -name x").read_only);
        assert_eq!(fx("docker", "run -v /:/host alpine sh").writes, ["/"]);
        assert_eq!(
            fx("docker", "run -v /w/src:/app -v cache:/c img").writes,
            ["/w/src"]
        );
        assert!(fx("docker", "run --privileged img").system.is_some());
        assert!(fx("docker", "ps").read_only);
    }

    #[test]
    fn git_history_and_reads() {
        for push in [
            "push -f",
            "push --force origin main",
            "push -uf origin x",
            "push origin +main",
            "push --force-with-lease",
        ] {
            assert!(fx("git", push).history.is_some(), "{push}");
        }
        assert!(fx("git", "push origin main").history.is_none());
        assert!(fx("git", "push -u origin feature").history.is_none());
        assert!(fx("git", "reset --hard origin/main").history.is_some());
        assert!(fx("git", "filter-branch --tree-filter x").history.is_some());
        assert!(fx("git", "status").read_only && fx("git", "log --oneline -5").read_only);
        assert!(!fx("git", "commit -m x").read_only);
        let (_, opaque) = classify("git", &words("-c alias.x=!sh x"), &|w: &Word| {
            w.text.clone()
        });
        assert!(opaque.is_some());
        let (_, opaque) = classify("git", &words("-c user.name=x commit"), &|w: &Word| {
            w.text.clone()
        });
        assert!(opaque.is_none());
    }

    #[test]
    fn sed_scripts_that_run_or_write() {
        assert!(matches!(sed_script_risk("s/a/b/e"), SedRisk::Runs));
        assert!(matches!(sed_script_risk("1e rm -rf ~"), SedRisk::Runs));
        assert!(matches!(sed_script_risk("/x/w out"), SedRisk::Writes));
        assert!(matches!(sed_script_risk("s/hello/world/g"), SedRisk::None));
        assert!(matches!(sed_script_risk("s|e|w|g;5d"), SedRisk::None));
    }
}
