//! The command line: which figures a run measures, on which encodings, and
//! where it keeps the stores it generates.

use std::path::PathBuf;

use crate::write::Enc;

pub const USAGE: &str = "\
Usage: cargo run --release --example bench -- [OPTIONS]

Options:
  --scale F          scale every generated size by F (default 1; e.g. 0.1 for a quick run)
  --dir PATH         where stores are generated and cached (default /tmp/sessionfs-bench)
  --seed N           generator seed (default 20260314)
  --encodings LIST   comma-separated subset of zstd,raw,sqlite (default all)
  --figures LIST     comma-separated subset of 1,c,2,3,4,s,i (default all; c = concurrency,
                     s = steps/, i = remounts with the persistent index)
  --regenerate       rebuild cached stores
  --gen-only         generate the stores, print their shape and stop
  --no-build         do not run `cargo build --release --bin sessionfs` first
  --mount-options O  more -o options for every mount (e.g. cache=256M)
  --harness-inspect CMD
                     figure 1's reference: a shell command that runs the Harness's
                     inspect() on one session; {store}, {id} and {encoding} are
                     replaced (quoted) by the store (JSONL root or SQLite file), the
                     session id and zstd|raw|sqlite. Not given: not measured
  --follow           measure following a growing session instead (issue #5)
  --duration SECS    how long --follow appends (default 60)
  --rate N           events per second appended by --follow (default 1000)
  -h, --help         print this help
";

pub struct Options {
    pub scale: f64,
    pub dir: PathBuf,
    pub seed: u64,
    pub encodings: Vec<Enc>,
    pub figures: Vec<String>,
    pub regenerate: bool,
    pub gen_only: bool,
    pub build: bool,
    /// Appended to every mount's options.
    pub mount_options: Option<String>,
    /// Figure 1's Harness `inspect()` command template (see `harness.rs`).
    pub harness_inspect: Option<String>,
    pub follow: bool,
    pub duration: f64,
    pub rate: u64,
}

pub fn parse() -> Result<Options, String> {
    let mut options = Options {
        scale: 1.0,
        dir: PathBuf::from("/tmp/sessionfs-bench"),
        seed: 20_260_314,
        encodings: Enc::ALL.to_vec(),
        figures: ["1", "c", "2", "3", "4", "s", "i"]
            .map(String::from)
            .to_vec(),
        regenerate: false,
        gen_only: false,
        build: true,
        mount_options: None,
        harness_inspect: None,
        follow: false,
        duration: 60.0,
        rate: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--scale" => {
                options.scale = value("--scale")?
                    .parse()
                    .map_err(|_| "--scale takes a number")?
            }
            "--dir" => options.dir = PathBuf::from(value("--dir")?),
            "--seed" => {
                options.seed = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed takes a whole number")?
            }
            "--encodings" => {
                options.encodings = value("--encodings")?
                    .split(',')
                    .map(|e| Enc::parse(e).ok_or(format!("unknown encoding {e:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--figures" => {
                options.figures = value("--figures")?.split(',').map(String::from).collect()
            }
            "--regenerate" => options.regenerate = true,
            "--gen-only" => options.gen_only = true,
            "--no-build" => options.build = false,
            "--mount-options" => options.mount_options = Some(value("--mount-options")?),
            "--harness-inspect" => options.harness_inspect = Some(value("--harness-inspect")?),
            "--follow" => options.follow = true,
            "--duration" => {
                options.duration = value("--duration")?
                    .parse()
                    .map_err(|_| "--duration takes seconds")?
            }
            "--rate" => {
                options.rate = value("--rate")?
                    .parse()
                    .map_err(|_| "--rate takes a whole number")?
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if options.scale.is_nan() || options.scale <= 0.0 {
        return Err("--scale must be positive".into());
    }
    Ok(options)
}
