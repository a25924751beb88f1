# LMDB store: tests beyond the contract suite (contract.lmdb is registered in
# tests/CMakeLists.txt).

# store.c refers to idem_backend_lmdb weakly while stores land; a weak
# reference does not pull lmdb.o out of the static library, so ask for it.
foreach(t contract idem)
  if(TARGET ${t})
    target_link_options(${t} PRIVATE "LINKER:--undefined=idem_backend_lmdb")
  endif()
endforeach()
