# MPI only starts jobs of one process per GPU (reprise::MpiDataParallel: it passes NCCL's id and
# each rank's place; NCCL moves the data). Optional: without it (-DREPRISE_WITH_MPI=OFF, or no MPI
# installed) everything else builds, LocalDataParallel drives all local GPUs from one process, and
# MpiDataParallel returns Unimplemented. Only MPI's C interface is used.
option(REPRISE_WITH_MPI "Build MpiDataParallel when MPI is found" ON)
if(REPRISE_WITH_MPI)
  enable_language(C)  # FindMPI checks the C interface with the C compiler.
  find_package(MPI COMPONENTS C QUIET)
endif()
if(MPI_C_FOUND)
  message(STATUS "MPI: ${MPI_C_LIBRARIES} (MpiDataParallel built; launcher ${MPIEXEC_EXECUTABLE})")
  # Open MPI's and MPICH's mpi.h pull in their deprecated C++ bindings unless told not to.
  set(REPRISE_MPI_DEFINITIONS OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
else()
  message(STATUS "MPI: not used (MpiDataParallel returns Unimplemented)")
endif()
