# embed.cmake - writes the text of IN, followed by those of IN2 and IN3 if
# given, as a C string constant NAME into OUT (run at build time: cmake
# -DIN=... [-DIN2=... -DIN3=...] -DOUT=... -DNAME=... -P embed.cmake).
set(text "")
foreach(f IN ITEMS ${IN} ${IN2} ${IN3})
  file(READ "${f}" part HEX)
  string(APPEND text "${part}")
endforeach()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${text}")
# Aligned: a CUDA fatbin is read in place by cuModuleLoadData.
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\nstatic const char ${NAME}[] __attribute__((aligned(64))) = {${bytes} 0x00};\n")
