//! Names the commit the binary is built from, for `mcp-taskd --version`, as the
//! `MCP_TASKD_COMMIT` environment variable of the compilation (12 hex digits, or
//! `unknown`). In order:
//!
//! 1. `MCP_TASKD_COMMIT` in the build's environment (a packager who knows better);
//! 2. `git rev-parse HEAD`, when this directory is the top of a git work tree (and not
//!    a tarball unpacked inside some other repository);
//! 3. the `.commit` file, which `git archive` fills in (`export-subst` in
//!    `.gitattributes`), so that a release tarball without `.git` still knows;
//! 4. `unknown`.
//!
//! The build script reruns when HEAD moves (the files git keeps it in), not on every
//! edit: a build from a tree with uncommitted changes names the commit they sit on.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=.commit");
    println!("cargo:rerun-if-env-changed=MCP_TASKD_COMMIT");
    let commit = std::env::var("MCP_TASKD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .or_else(|| from_git(&root))
        .or_else(|| from_archive(&root))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=MCP_TASKD_COMMIT={commit}");
}

/// Runs git in `root`; its trimmed output when it succeeds.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8(output.stdout).ok()?.trim().to_owned())
}

/// HEAD's commit when `root` is the top of a git work tree; asks cargo to rerun when
/// HEAD, its branch or the packed refs change.
fn from_git(root: &Path) -> Option<String> {
    let top = PathBuf::from(git(root, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != root.canonicalize().ok()? {
        return None;
    }
    let head = git(root, &["rev-parse", "--verify", "HEAD"])?;
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        // A path that does not exist would make cargo rerun this script on every build.
        if let Some(path) = git(root, &["rev-parse", "--git-path", &name]) {
            let path = root.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    short(&head)
}

/// The commit `git archive` wrote into `.commit` (it holds `$Format:%H$` in the tree).
fn from_archive(root: &Path) -> Option<String> {
    short(std::fs::read_to_string(root.join(".commit")).ok()?.trim())
}

/// The first 12 hex digits of a full commit id, if `id` is one.
fn short(id: &str) -> Option<String> {
    let full = id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit());
    full.then(|| id[..12].to_owned())
}
