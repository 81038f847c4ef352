# The image bork-ci's Buildkite and Jenkins pipelines run in: the repository's toolchain image with
# bork-ci copied in from its release image, so the checker (run with `--sandbox none`, the step's
# container being the sandbox) finds the compilers and test tools it needs. Written by
# `bork-ci init --ci buildkite|jenkins` as .config/bork-ci.Dockerfile; a judge file, so an edit of
# it by the model is held for approval.
#   - the first FROM names bork-ci's release (pin it by digest: IMAGE:VERSION@sha256:...);
#   - the second is the toolchain: keep it the image `sandbox.image` in .config/bork.json names.
FROM ghcr.io/bork-ci/bork-ci:0.1.0 AS bork-ci
FROM TOOLCHAIN_IMAGE
COPY --from=bork-ci /usr/local/bin/bork-ci /usr/local/bin/bork-ci
# bork-ci needs git (and CA certificates to reach the model); Debian-based toolchain images
# without them get them from apt, others must have them already.
RUN command -v git >/dev/null 2>&1 || { apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*; }
