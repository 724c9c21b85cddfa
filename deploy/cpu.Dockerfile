# Runtime image of the stack's CPU variant (deploy/compose.cpu.yml): a Debian bookworm userland with the
# system libraries the trainer and vLLM CPU environments need. The environments themselves, the tiny models
# and the checkout are the host's (make setup), bind-mounted read-only at their host paths, so the CPU
# variant runs exactly the code and packages the rest of the test suite runs, without copying 7 GB of
# environments into images. BASE is the registry-free Debian rootfs of scripts/build_sandbox_image.sh.
# g++ and the Python headers: vLLM's CPU sampler is compiled by torch inductor at the first request.
ARG BASE=debian:bookworm
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3.11 python3.11-dev g++ libnuma1 curl procps ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
