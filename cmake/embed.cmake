# embed.cmake - writes the text of IN as a C string constant NAME into OUT
# (run at build time: cmake -DIN=... -DOUT=... -DNAME=... -P embed.cmake).
file(READ "${IN}" text HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${text}")
# Aligned: a CUDA fatbin is read in place by cuModuleLoadData.
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\nstatic const char ${NAME}[] __attribute__((aligned(64))) = {${bytes} 0x00};\n")
