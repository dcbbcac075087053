# cmake -P script: install, configure a consumer, build it, run it.
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK}/build)
run(${WORK}/build/consumer ${WORK}/roundtrip.ckfmt)

# The public headers with another compiler: Clang, where the build found one.
if(CLANGXX)
  run(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK}/build-clang -G ${GENERATOR}
      -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CXX_COMPILER=${CLANGXX})
  run(${CMAKE_COMMAND} --build ${WORK}/build-clang)
  run(${WORK}/build-clang/consumer ${WORK}/roundtrip-clang.ckfmt)
endif()
