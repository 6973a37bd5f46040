-- wrk script: POSTs the serving benchmark's /predict bodies round-robin, as
-- `numaserve-bench load` does, so the two load generators can be compared.
-- Usage: wrk -t1 -c4 -d5s -s bench/wrk_predict.lua http://127.0.0.1:PORT/predict -- BODIES
-- where BODIES holds one JSON body per line (`numaserve-bench bodies`).
local bodies = {}
local next_body = 0

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  if #bodies == 0 then
    error("no bodies in " .. tostring(args[1]))
  end
end

function request()
  next_body = next_body % #bodies + 1
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, bodies[next_body])
end
