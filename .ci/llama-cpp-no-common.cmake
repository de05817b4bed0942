# Included by llama-cpp-python's build right after llama.cpp's project() (the Makefile passes it as
# CMAKE_PROJECT_llama.cpp_INCLUDE): llama.cpp's `common` library (and cpp-httplib, which only it
# uses) is for llama.cpp's own programs; the Python package never loads it, and llama-cpp-python
# forces it on in its cache. A plain variable of the same name wins over that cache entry in
# llama.cpp's folders (option() leaves an existing variable alone), so neither is compiled.
set(LLAMA_BUILD_COMMON OFF)
