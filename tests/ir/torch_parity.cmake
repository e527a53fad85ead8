# Driver of the CTest test ir_torch_parity (see CMakeLists.txt): exports
# Tandem's tensors into WORK_DIR, then checks them with PyTorch.
#   cmake -DEXPORTER=... -DSCRIPT=... -DPYTHON=... -DWORK_DIR=... -P torch_parity.cmake
foreach(var EXPORTER SCRIPT PYTHON WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "torch_parity.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${PYTHON}")
  message(FATAL_ERROR "ir_torch_parity: no Python at ${PYTHON}: make the environment with tools/setup.sh "
                      "(tools/python/make_venv.sh build/venv)")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND "${EXPORTER}" "${WORK_DIR}" RESULT_VARIABLE export_result)
if(NOT export_result EQUAL 0)
  message(FATAL_ERROR "ir_torch_parity: ${EXPORTER} failed (${export_result})")
endif()
execute_process(COMMAND "${PYTHON}" "${SCRIPT}" "${WORK_DIR}" RESULT_VARIABLE check_result)
if(NOT check_result EQUAL 0)
  message(FATAL_ERROR "ir_torch_parity: ${SCRIPT} failed (${check_result})")
endif()
