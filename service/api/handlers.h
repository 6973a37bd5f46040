#pragma once
// The routes' handlers, each a function of the shared state and one call;
// router.cpp maps methods and paths to them.

#include "api/call.h"
#include "api/service.h"

namespace numaserve::api {

Answer predict(Service& service, Call& call);  // predict.cpp

// v2.cpp: KServe's Open Inference Protocol v2.
Answer v2_server(Service& service, Call& call);
Answer v2_live(Service& service, Call& call);
Answer v2_ready(Service& service, Call& call);
Answer v2_model(Service& service, Call& call);
Answer v2_model_ready(Service& service, Call& call);
Answer v2_infer(Service& service, Call& call);

// operations.cpp: what operators and probes ask.
Answer healthz(Service& service, Call& call);
Answer readyz(Service& service, Call& call);
Answer prometheus_metrics(Service& service, Call& call);
Answer placement(Service& service, Call& call);

// repository.cpp: Triton's model repository extension (admin port only).
Answer repository_index(Service& service, Call& call);
Answer repository_load(Service& service, Call& call);
Answer repository_unload(Service& service, Call& call);

}  // namespace numaserve::api
