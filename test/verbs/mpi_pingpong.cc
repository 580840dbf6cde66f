// SPDX-License-Identifier: BSD-3-Clause
// An MPI ping-pong between ranks 0 and 1: for each message size, ROUNDS round trips in which
// rank 0 sends a buffer, rank 1 checks it and sends back its own, and rank 0 checks that. Each
// buffer's bytes depend on the size, the round and the sender, so a message delivered twice,
// late, truncated or to the wrong receive shows as a wrong byte. Any mismatch or MPI error
// exits non-zero (MPI_Abort); rank 0 prints one line per size when all its rounds checked.
//
//   mpi_pingpong [ROUNDS [SIZE...]]    defaults: 100 rounds of 8 B, 4 KiB, 64 KiB and 1 MiB
//
// The sizes cover UCX's protocols: short and bcopy sends, and the rendezvous of a large
// message (zero-copy RDMA over an RC transport).

// The C API only: Open MPI's C++ bindings (deprecated) do not build warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

std::uint8_t pattern_byte(std::size_t size, int round, int sender, std::size_t i) {
  return static_cast<std::uint8_t>((i * 131u) ^ (size * 7u) ^ (static_cast<unsigned>(round) << 3) ^
                                   (static_cast<unsigned>(sender) * 0x5bu));
}

void fill(std::vector<std::uint8_t>& buf, int round, int sender) {
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = pattern_byte(buf.size(), round, sender, i);
}

// The index of the first wrong byte, or buf.size() when all are right.
std::size_t first_wrong(const std::vector<std::uint8_t>& buf, int round, int sender) {
  for (std::size_t i = 0; i < buf.size(); ++i)
    if (buf[i] != pattern_byte(buf.size(), round, sender, i)) return i;
  return buf.size();
}

bool parse_count(const char* text, unsigned long max, unsigned long& out) {
  char* end = nullptr;
  unsigned long v = std::strtoul(text, &end, 10);
  if (end == text || *end != '\0' || v == 0 || v > max) return false;
  out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (rank == 0) std::fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks, has %d\n", ranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  unsigned long rounds = 100;
  std::vector<std::size_t> sizes{8, 4096, 65536, 1u << 20};
  if (argc > 1 && !parse_count(argv[1], 1000000, rounds)) {
    if (rank == 0) std::fprintf(stderr, "mpi_pingpong: bad round count '%s'\n", argv[1]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (argc > 2) {
    sizes.clear();
    for (int a = 2; a < argc; ++a) {
      unsigned long s = 0;
      if (!parse_count(argv[a], 1ul << 28, s)) {
        if (rank == 0) std::fprintf(stderr, "mpi_pingpong: bad size '%s'\n", argv[a]);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      sizes.push_back(s);
    }
  }
  const int peer = 1 - rank;
  for (std::size_t size : sizes) {
    std::vector<std::uint8_t> out(size);
    std::vector<std::uint8_t> in(size);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    for (int round = 0; round < static_cast<int>(rounds); ++round) {
      fill(out, round, rank);
      MPI_Status status;
      if (rank == 0) {
        MPI_Send(out.data(), static_cast<int>(size), MPI_BYTE, peer, round, MPI_COMM_WORLD);
        MPI_Recv(in.data(), static_cast<int>(size), MPI_BYTE, peer, round, MPI_COMM_WORLD, &status);
      } else {
        MPI_Recv(in.data(), static_cast<int>(size), MPI_BYTE, peer, round, MPI_COMM_WORLD, &status);
        MPI_Send(out.data(), static_cast<int>(size), MPI_BYTE, peer, round, MPI_COMM_WORLD);
      }
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      const std::size_t wrong = first_wrong(in, round, peer);
      if (static_cast<std::size_t>(got) != size || wrong != size) {
        std::fprintf(stderr,
                     "mpi_pingpong: rank %d, %zu-byte message of round %d from rank %d: "
                     "%d bytes received, first wrong byte at %zu\n",
                     rank, size, round, peer, got, wrong);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start).count();
    if (rank == 0)
      std::printf("mpi_pingpong: %zu bytes: %lu round trips checked, %.1f us each\n", size,
                  rounds, us / static_cast<double>(rounds));
  }
  MPI_Finalize();
  return 0;
}
