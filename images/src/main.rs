//! `cozyplane-images`: builds the images offline (`build`, what `make images` runs) or only
//! stages a build context for `docker build` (`stage`, for a CI with a docker engine).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use cozyplane_images::layer::Compression;
use cozyplane_images::plan::{self, Plan};
use cozyplane_images::report::{Built, Report};
use cozyplane_images::revision::{self, Revision};
use cozyplane_images::{assemble, containerfile, sbom, stage};

/// The images' version: this crate shares the workspace's version (Cargo.toml
/// `[workspace.package]`), which is the version of the binaries inside.
const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Parser)]
#[command(
    name = "cozyplane-images",
    version,
    about = "Builds cozyplane's container images offline"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Stage and build images into OCI archives, with their SBOMs and images.json.
    Build(BuildArgs),
    /// Only fill a build context for `docker build -f images/<image>/Containerfile <context>`.
    Stage(StageArgs),
}

#[derive(Args)]
struct Common {
    /// The repository's root (the Containerfiles are under images/).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Where the built binaries are [default: $CARGO_TARGET_DIR/release, else <repo>/target/release].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

#[derive(Args)]
struct BuildArgs {
    #[command(flatten)]
    common: Common,
    /// Where the archives, SBOMs, images.json and the staged contexts go
    /// [default: $CARGO_TARGET_DIR/images, else <repo>/target/images].
    #[arg(long)]
    out: Option<PathBuf>,
    /// The registry and path the references name.
    #[arg(long, default_value = "ghcr.io/cozystack")]
    registry: String,
    /// How layers are stored.
    #[arg(long, value_enum, default_value = "gzip")]
    compression: Compression,
    /// Which images (`apiserver`, `agent`) [default: all].
    images: Vec<String>,
}

#[derive(Args)]
struct StageArgs {
    #[command(flatten)]
    common: Common,
    /// The build context to fill (its rootfs/ is replaced).
    #[arg(long)]
    context: PathBuf,
    /// The registry and path the suggested `docker build -t` names.
    #[arg(long, default_value = "ghcr.io/cozystack")]
    registry: String,
    /// Which image (`apiserver`, `agent`).
    image: String,
}

type Error = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::Build(a) => build(&a),
        Cmd::Stage(a) => stage_only(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cozyplane-images: {e}");
            ExitCode::FAILURE
        }
    }
}

fn target_dir(repo: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo.join("target"), PathBuf::from)
}

fn find(name: &str) -> Result<&'static Plan, Error> {
    plan::find(name).ok_or_else(|| {
        let known: Vec<&str> = plan::ALL.iter().map(|p| p.short).collect();
        format!("no image {name:?} (known: {})", known.join(", ")).into()
    })
}

/// The commit, and the time every timestamp of the image gets: SOURCE_DATE_EPOCH when set
/// (the reproducible-builds convention), else the commit's time.
fn revision(repo: &Path) -> Result<(Revision, i64), Error> {
    let rev = revision::read(repo)?;
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("SOURCE_DATE_EPOCH={s:?}: {e}"))?,
        Err(_) => rev.time,
    };
    Ok((rev, epoch))
}

/// Stages `plan` into `context` and puts its SBOM into the rootfs.
fn stage_with_sbom(
    plan: &Plan,
    common: &Common,
    context: &Path,
) -> Result<(stage::Staged, sbom::Sbom), Error> {
    let bin_dir = common
        .bin_dir
        .clone()
        .unwrap_or_else(|| target_dir(&common.repo).join("release"));
    let mut staged = stage::stage(plan, &bin_dir, context)?;
    let sbom = sbom::collect(plan.name, &staged, &common.repo)?;
    staged.write(stage::SBOM_PATH, &sbom.to_json())?;
    Ok((staged, sbom))
}

fn build_args(tag: &str, rev: &Revision) -> BTreeMap<String, String> {
    [
        ("VERSION".to_string(), tag.to_string()),
        ("REVISION".to_string(), rev.commit.clone()),
    ]
    .into()
}

fn stage_only(a: &StageArgs) -> Result<(), Error> {
    let plan = find(&a.image)?;
    let (rev, _) = revision(&a.common.repo)?;
    let tag = rev.tag(VERSION);
    stage_with_sbom(plan, &a.common, &a.context)?;
    println!(
        "docker build -f {} --build-arg VERSION={tag} --build-arg REVISION={} -t {}/{}:{tag} {}",
        a.common
            .repo
            .join("images")
            .join(plan.short)
            .join("Containerfile")
            .display(),
        rev.commit,
        a.registry,
        plan.name,
        a.context.display()
    );
    Ok(())
}

fn build(a: &BuildArgs) -> Result<(), Error> {
    let repo = &a.common.repo;
    let out = a.out.clone().unwrap_or_else(|| target_dir(repo).join("images"));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let plans: Vec<&Plan> = if a.images.is_empty() {
        plan::ALL.to_vec()
    } else {
        a.images.iter().map(|n| find(n)).collect::<Result<_, _>>()?
    };
    let (rev, epoch) = revision(repo)?;
    let tag = rev.tag(VERSION);
    let mut report = Report {
        tag: tag.clone(),
        revision: rev.commit.clone(),
        dirty: rev.dirty,
        source_date_epoch: epoch,
        images: vec![],
    };
    for plan in plans {
        let context = out.join("stage").join(plan.short);
        let (_, sbom) = stage_with_sbom(plan, &a.common, &context)?;
        let file = repo.join("images").join(plan.short).join("Containerfile");
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let lines = containerfile::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let image = assemble::assemble(&lines, &context, &build_args(&tag, &rev), epoch, a.compression)
            .map_err(|e| format!("{}: {e}", file.display()))?;

        let repository = format!("{}/{}", a.registry, plan.name);
        let reference = format!("{repository}:{tag}");
        let archive = format!("{}-{tag}.oci.tar", plan.name);
        let sbom_file = format!("{}-{tag}.sbom.json", plan.name);
        let mtime = u64::try_from(epoch).unwrap_or(0);
        let archive_size = image
            .write_archive(&reference, mtime, &out.join(&archive))
            .map_err(|e| format!("{}: {e}", out.join(&archive).display()))?;
        std::fs::write(out.join(&sbom_file), sbom.to_json())?;
        let built = Built {
            name: plan.name.to_string(),
            reference,
            repository,
            digest: image.digest(),
            archive,
            sbom: sbom_file,
            archive_size,
            compressed_size: image.compressed_size(),
            uncompressed_size: image.uncompressed_size(),
            entries: image.layers.iter().map(|l| l.entries).sum(),
            debian_packages: sbom
                .debian_packages
                .iter()
                .map(|p| format!("{} {}", p.name, p.version))
                .collect(),
            crates: sbom
                .binaries
                .iter()
                .map(|b| format!("{}: {} crates", b.path, b.crates.len()))
                .collect(),
        };
        print!("{}", built.summary());
        report.images.push(built);
    }
    let index = out.join("images.json");
    report
        .write(&index)
        .map_err(|e| format!("{}: {e}", index.display()))?;
    println!("wrote {}", index.display());
    Ok(())
}
