/* slurm-allreduce.c - the MPI check of deploy/slurm-cluster.sh: every rank
 * contributes rank+1, MPI_Allreduce sums them; rank 0 prints the sum, which
 * must be n(n+1)/2, and each rank its host (the node's UTS hostname).
 * Build: mpicc -O2 -o /tmp/allreduce deploy/slurm-allreduce.c */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int rank, size;
  long mine, sum = 0;
  char host[256] = "?";
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  gethostname(host, sizeof host);
  mine = rank + 1;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d/%d on %s: sum %ld\n", rank, size, host, sum);
  if (rank == 0)
    printf("allreduce %s: sum %ld, expected %ld\n",
           sum == (long)size * (size + 1) / 2 ? "ok" : "WRONG", sum,
           (long)size * (size + 1) / 2);
  MPI_Finalize();
  return sum == (long)size * (size + 1) / 2 ? 0 : 1;
}
