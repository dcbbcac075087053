# Distributed save/load (engine/src/dist, engine/include/ckfmt/dist).
# engine/CMakeLists.txt includes this file after defining ckfmt_engine.
#   - always: communicator interface, single-process backend, layouts,
#     planning, both save modes and the resharding load;
#   - with MPI (find_package(MPI COMPONENTS CXX) at the top level): the MPI
#     backend, CKFMT_HAVE_MPI=1 for users of ckfmt_engine;
#   - with CUDA and NCCL: the NCCL backend, CKFMT_HAVE_NCCL=1.
set(CKFMT_DIST_DIR ${CMAKE_CURRENT_LIST_DIR}/src/dist)
target_sources(ckfmt_engine PRIVATE
  ${CKFMT_DIST_DIR}/buckets.cc
  ${CKFMT_DIST_DIR}/communicator.cc
  ${CKFMT_DIST_DIR}/device_sends.cc
  ${CKFMT_DIST_DIR}/dist_load.cc
  ${CKFMT_DIST_DIR}/dist_save.cc
  ${CKFMT_DIST_DIR}/flattened_save.cc
  ${CKFMT_DIST_DIR}/layout.cc
  ${CKFMT_DIST_DIR}/parallel_save.cc
  ${CKFMT_DIST_DIR}/plan.cc
  ${CKFMT_DIST_DIR}/sharded_state.cc
  ${CKFMT_DIST_DIR}/wire.cc)

# For cmake/ckfmtConfig.cmake.in: an installed ckfmt_engine needs these found.
set(CKFMT_WITH_MPI OFF CACHE INTERNAL "ckfmt_engine links MPI")
set(CKFMT_WITH_NCCL OFF CACHE INTERNAL "ckfmt_engine links CUDA and NCCL")

if(MPI_CXX_FOUND)
  set(CKFMT_WITH_MPI ON CACHE INTERNAL "ckfmt_engine links MPI")
  target_sources(ckfmt_engine PRIVATE ${CKFMT_DIST_DIR}/mpi_communicator.cc)
  target_link_libraries(ckfmt_engine PUBLIC MPI::MPI_CXX)
  target_compile_definitions(ckfmt_engine PUBLIC CKFMT_HAVE_MPI=1)
endif()

if(CUDAToolkit_FOUND AND NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
  set(CKFMT_WITH_NCCL ON CACHE INTERNAL "ckfmt_engine links CUDA and NCCL")
  target_sources(ckfmt_engine PRIVATE ${CKFMT_DIST_DIR}/nccl_communicator.cc)
  target_include_directories(ckfmt_engine PUBLIC $<BUILD_INTERFACE:${NCCL_INCLUDE_DIR}>)
  target_link_libraries(ckfmt_engine PUBLIC CUDA::cudart ${NCCL_LIBRARY})
  target_compile_definitions(ckfmt_engine PUBLIC CKFMT_HAVE_NCCL=1)
endif()
message(STATUS "ckfmt dist: MPI backend ${CKFMT_WITH_MPI}, NCCL backend ${CKFMT_WITH_NCCL}")
