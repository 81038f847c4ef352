//! bork-ci's GitHub delivery: the result pull request, the approval pull requests, the label
//! and the state a later job resumes from. Its inputs are typed (`GithubFlags`, `GithubContext`,
//! `PublishInput`); it cannot see the configuration. It depends on `bork-ci-core` and
//! `bork-ci-run` (the report's status, what a run spent), and it is the only crate that talks
//! to GitHub's REST API.
pub mod github;
