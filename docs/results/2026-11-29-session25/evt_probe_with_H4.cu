#include <cstdio>
#include <chrono>
#include <cuda_runtime.h>
#define C(x) do{cudaError_t e_=(x);if(e_)printf("L%d %s -> %s\n",__LINE__,#x,cudaGetErrorString(e_));cudaGetLastError();}while(0)
typedef unsigned long long U;
__device__ U gt(){U t;asm volatile("mov.u64 %0, %%globaltimer;":"=l"(t));return t;}
__global__ void spin(U ns){U s=gt();while(gt()-s<ns);}
__global__ void stamp(U*p,int*c){p[atomicAdd(c,1)]=gt();}
__global__ void stampAt(U*p){*p=gt();}
__global__ void pdl(int*x){asm volatile("griddepcontrol.wait;":::"memory");if(threadIdx.x==0)atomicAdd(x,1);asm volatile("griddepcontrol.launch_dependents;");}
U*T;int*cnt;cudaStream_t s[8],cs;
void st(cudaStream_t q){stamp<<<1,1,0,q>>>(T,cnt);}
double ms(int i,int j){return ((double)T[i]-(double)T[j])/1e6;}
bool waitAll(double sec){auto t0=std::chrono::steady_clock::now();
  for(;;){bool done=true;for(auto q:s)if(cudaStreamQuery(q)==cudaErrorNotReady)done=false;if(done)return true;
    if(std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count()>sec)return false;}}
void reset(){waitAll(10);cudaStreamSynchronize(cs);*cnt=0;}
void plk(cudaStream_t q,int*x,bool prog){cudaLaunchConfig_t c={};c.gridDim=1;c.blockDim=32;c.stream=q;cudaLaunchAttribute a[1];
  a[0].id=cudaLaunchAttributeProgrammaticStreamSerialization;a[0].val.programmaticStreamSerializationAllowed=1;c.attrs=a;c.numAttrs=prog;
  C(cudaLaunchKernelEx(&c,pdl,x));}
// Leaf record node of E chained after *prev, depending on the stream's current capture frontier (enqueue.cc addSerialRecordNode).
void leafRecord(cudaStream_t q,cudaEvent_t E,cudaGraphNode_t*prev){cudaStreamCaptureStatus st;cudaGraph_t g;const cudaGraphNode_t*d;const cudaGraphEdgeData*ed;size_t n;
  C(cudaStreamGetCaptureInfo(q,&st,nullptr,&g,&d,&ed,&n));cudaGraphNode_t a[16];size_t k=0;for(size_t i=0;i<n&&k<15;i++)a[k++]=d[i];if(*prev)a[k++]=*prev;
  cudaGraphNode_t nd=nullptr;C(cudaGraphAddEventRecordNode(&nd,g,a,k,E));if(nd)*prev=nd;}
int main(){
  C(cudaHostAlloc(&T,4096,cudaHostAllocMapped));C(cudaMallocManaged(&cnt,4));*cnt=0;
  for(auto&q:s)C(cudaStreamCreateWithFlags(&q,cudaStreamNonBlocking));C(cudaStreamCreateWithFlags(&cs,cudaStreamNonBlocking));
  cudaEvent_t E,E2,E3,E4;for(auto e:{&E,&E2,&E3,&E4})C(cudaEventCreateWithFlags(e,cudaEventDisableTiming));
  cudaGraph_t g;cudaGraphExec_t x,x2;
  // A: graph = spin50 -> wait(E ext) -> stamp. E: rec1 after 100ms on s1, launch, rec2 after 300ms on s3.
  C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));spin<<<1,1,0,cs>>>(50000000);
  C(cudaStreamWaitEvent(cs,E,cudaEventWaitExternal));st(cs);C(cudaStreamEndCapture(cs,&g));C(cudaGraphInstantiate(&x,g,0));
  reset();st(s[0]);spin<<<1,1,0,s[0]>>>(100000000);C(cudaEventRecord(E,s[0]));C(cudaGraphLaunch(x,s[1]));
  spin<<<1,1,0,s[2]>>>(300000000);C(cudaEventRecord(E,s[2]));waitAll(5);
  printf("A wait node: graph stamp at %.1f ms (100=record at launch, 300=record at node exec, 50=none)\n",ms(1,0));
  // B: graph = spin200 -> record(E2 ext). Launch twice; eager waits after each.
  C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));spin<<<1,1,0,cs>>>(200000000);
  C(cudaEventRecordWithFlags(E2,cs,cudaEventRecordExternal));C(cudaStreamEndCapture(cs,&g));C(cudaGraphInstantiate(&x,g,0));
  reset();st(s[0]);C(cudaGraphLaunch(x,s[1]));C(cudaStreamWaitEvent(s[2],E2,0));st(s[2]);
  C(cudaGraphLaunch(x,s[3]));C(cudaStreamWaitEvent(s[4],E2,0));st(s[4]);waitAll(5);
  printf("B record node: eager waits end at %.1f and %.1f ms (200,400 = updated at each launch)\n",ms(1,0),ms(2,0));
  // C: YALI pattern, 2 calls in one graph, two execs launched on 2 streams, then eager.
  C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));
  for(int k=0;k<2;k++){C(cudaStreamWaitEvent(cs,E3,cudaEventWaitExternal));spin<<<1,1,0,cs>>>(100000000);st(cs);
    C(cudaEventRecordWithFlags(E3,cs,cudaEventRecordExternal));}
  C(cudaStreamEndCapture(cs,&g));C(cudaGraphInstantiate(&x,g,0));C(cudaGraphInstantiate(&x2,g,0));
  reset();st(s[0]);C(cudaGraphLaunch(x,s[1]));C(cudaGraphLaunch(x2,s[2]));C(cudaStreamWaitEvent(s[3],E3,0));st(s[3]);
  bool ok=waitAll(5);printf("C two execs: %s; stamps",ok?"done":"DEADLOCK/timeout");for(int i=1;i<6;i++)printf(" %.1f",ms(i,0));printf(" (expect 100 200 300 400 400)\n");
  if(!ok)return 1;
  // D: device launch instantiate with ext event nodes.
  C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));C(cudaStreamWaitEvent(cs,E,cudaEventWaitExternal));spin<<<1,1,0,cs>>>(1);
  C(cudaEventRecordWithFlags(E,cs,cudaEventRecordExternal));C(cudaStreamEndCapture(cs,&g));
  cudaError_t e=cudaGraphInstantiate(&x,g,cudaGraphInstantiateFlagDeviceLaunch);printf("D device-launch instantiate: %s\n",cudaGetErrorString(e));cudaGetLastError();
  // E: capture into a conditional body.
  {cudaGraph_t g0;C(cudaGraphCreate(&g0,0));cudaGraphConditionalHandle h;C(cudaGraphConditionalHandleCreate(&h,g0,1,cudaGraphCondAssignDefault));
   cudaGraphNodeParams p={};p.type=cudaGraphNodeTypeConditional;p.conditional.handle=h;p.conditional.type=cudaGraphCondTypeIf;p.conditional.size=1;
   cudaGraphNode_t n;C(cudaGraphAddNode(&n,g0,nullptr,nullptr,0,&p));cudaGraph_t body=p.conditional.phGraph_out[0];
   C(cudaStreamBeginCaptureToGraph(cs,body,nullptr,nullptr,0,cudaStreamCaptureModeThreadLocal));
   printf("E cond body wait ext: %s\n",cudaGetErrorString(cudaStreamWaitEvent(cs,E,cudaEventWaitExternal)));cudaGetLastError();
   spin<<<1,1,0,cs>>>(1);printf("E cond body record ext: %s\n",cudaGetErrorString(cudaEventRecordWithFlags(E,cs,cudaEventRecordExternal)));cudaGetLastError();
   cudaGraph_t t;printf("E end capture: %s\n",cudaGetErrorString(cudaStreamEndCapture(cs,&t)));cudaGetLastError();
   printf("E instantiate: %s\n",cudaGetErrorString(cudaGraphInstantiate(&x,g0,0)));cudaGetLastError();}
  // G: global-mode capture on cs; eager record/wait on other streams from the capturing thread.
  C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));spin<<<1,1,0,cs>>>(1);
  printf("G eager record during global capture: %s\n",cudaGetErrorString(cudaEventRecord(E4,s[0])));cudaGetLastError();
  printf("G eager wait during global capture: %s\n",cudaGetErrorString(cudaStreamWaitEvent(s[1],E4,0)));cudaGetLastError();
  printf("G capture wait ext on eager-recorded: %s\n",cudaGetErrorString(cudaStreamWaitEvent(cs,E4,cudaEventWaitExternal)));cudaGetLastError();
  printf("G end: %s\n",cudaGetErrorString(cudaStreamEndCapture(cs,&g)));cudaGetLastError();
  // H: YALI's node layout (next/all enqueue.cc) for 3 captured calls on A,B,A: per call
  // [wait O if stream changed (record O at old stream first time)] [wait ext S if capture's first] kernel
  // [record ext S] [record O if eventEveryLaunch]. Eager wait on S after the launch must end after the last call.
  {cudaEvent_t S,O,F,J1,J2;for(auto e:{&S,&O,&F,&J1,&J2})C(cudaEventCreateWithFlags(e,cudaEventDisableTiming));
   cudaStream_t A=s[5],B=s[6];C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));C(cudaEventRecord(F,cs));
   C(cudaStreamWaitEvent(A,F,0));C(cudaStreamWaitEvent(B,F,0));
   C(cudaStreamWaitEvent(A,S,cudaEventWaitExternal));spin<<<1,1,0,A>>>(20000000);C(cudaEventRecordWithFlags(S,A,cudaEventRecordExternal));
   C(cudaEventRecord(O,A));C(cudaStreamWaitEvent(B,O,0));  // call 2: first change of stream
   spin<<<1,1,0,B>>>(200000000);C(cudaEventRecordWithFlags(S,B,cudaEventRecordExternal));C(cudaEventRecord(O,B));
   C(cudaStreamWaitEvent(A,O,0));spin<<<1,1,0,A>>>(100000000);stampAt<<<1,1,0,A>>>(T+100);  // call 3
   C(cudaEventRecordWithFlags(S,A,cudaEventRecordExternal));C(cudaEventRecord(O,A));
   C(cudaEventRecord(J1,A));C(cudaEventRecord(J2,B));C(cudaStreamWaitEvent(cs,J1,0));C(cudaStreamWaitEvent(cs,J2,0));
   C(cudaStreamEndCapture(cs,&g));C(cudaGraphInstantiate(&x,g,0));
   for(int v=0;v<2;v++){reset();st(s[0]);C(cudaGraphLaunch(x,s[1]));C(cudaStreamWaitEvent(s[2],S,0));stampAt<<<1,1,0,s[2]>>>(T+101);waitAll(5);
    printf("H A,B,A capture: last call ends %.1f, eager after wait starts %.1f (must be >=)\n",ms(100,0),ms(101,0));}
   // H2: eager X on s2 (spin 200, record S) ; replay on s1 (its first node waits ext S) ; eager Y on s3 waits S.
   // Expect: replay's first call starts >= 200, Y starts >= replay end (~200+320).
   reset();st(s[0]);spin<<<1,1,0,s[2]>>>(200000000);stampAt<<<1,1,0,s[2]>>>(T+102);C(cudaEventRecord(S,s[2]));
   C(cudaGraphLaunch(x,s[1]));C(cudaStreamWaitEvent(s[3],S,0));stampAt<<<1,1,0,s[3]>>>(T+103);C(cudaEventRecord(S,s[3]));
   C(cudaGraphLaunch(x,s[4]));C(cudaStreamWaitEvent(s[7],S,0));stampAt<<<1,1,0,s[7]>>>(T+104);waitAll(5);
   printf("H2 X ends %.1f; replay1 last call ends %.1f... Y starts %.1f; replay2 ; Z starts %.1f (expect 200, >=~520, >=~840)\n",
          ms(102,0),ms(100,0),ms(103,0),ms(104,0));}
  // F: cost. N pdl kernels back to back; plain vs wait+kernel+record (same stream) per call.
  int*d;C(cudaMalloc(&d,4));cudaEvent_t a,b;cudaEventCreate(&a);cudaEventCreate(&b);const int N=4000;
  for(int v=0;v<4;v++){cudaDeviceSynchronize();auto h0=std::chrono::steady_clock::now();cudaEventRecord(a,s[0]);
    for(int i=0;i<N;i++){if(v&1)C(cudaStreamWaitEvent(s[0],E4,0));plk(s[0],d,v<2?1:0);if(v&1)C(cudaEventRecord(E4,s[0]));}
    auto h1=std::chrono::steady_clock::now();cudaEventRecord(b,s[0]);cudaEventSynchronize(b);float f;cudaEventElapsedTime(&f,a,b);
    printf("F eager %s %s: gpu %.2f us/call, host %.2f us/call\n",v<2?"pdl":"nopdl",v&1?"wait+rec":"plain",f*1e3/N,std::chrono::duration<double>(h1-h0).count()*1e6/N);}
  for(int v=0;v<2;v++){const int M=200;C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));
    for(int i=0;i<M;i++){if(v)C(cudaStreamWaitEvent(cs,E4,cudaEventWaitExternal));plk(cs,d,1);if(v)C(cudaEventRecordWithFlags(E4,cs,cudaEventRecordExternal));}
    C(cudaStreamEndCapture(cs,&g));size_t ne=0;C(cudaGraphGetEdges(g,nullptr,nullptr,nullptr,&ne));
    cudaGraphNode_t*fr=new cudaGraphNode_t[ne],*to=new cudaGraphNode_t[ne];cudaGraphEdgeData*ed=new cudaGraphEdgeData[ne];C(cudaGraphGetEdges(g,fr,to,ed,&ne));
    int prog=0;for(size_t i=0;i<ne;i++)prog+=ed[i].type==cudaGraphDependencyTypeProgrammatic;
    C(cudaGraphInstantiate(&x,g,0));C(cudaGraphLaunch(x,s[0]));cudaStreamSynchronize(s[0]);cudaEventRecord(a,s[0]);
    for(int r=0;r<20;r++)C(cudaGraphLaunch(x,s[0]));cudaEventRecord(b,s[0]);cudaEventSynchronize(b);float f;cudaEventElapsedTime(&f,a,b);
    printf("F graph %s: %zu edges, %d programmatic, gpu %.2f us/call\n",v?"wait+rec":"plain",ne,prog,f*1e3/(20*M));}
  // F3: graph with M pdl kernels, each followed by a chained leaf record node (the stream never depends on them).
  {const int M=200;cudaGraphNode_t prev=nullptr;C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));
    C(cudaStreamWaitEvent(cs,E4,cudaEventWaitExternal));
    for(int i=0;i<M;i++){plk(cs,d,1);leafRecord(cs,E4,&prev);}
    C(cudaStreamEndCapture(cs,&g));size_t ne=0;C(cudaGraphGetEdges(g,nullptr,nullptr,nullptr,&ne));
    cudaGraphNode_t*fr=new cudaGraphNode_t[ne],*to=new cudaGraphNode_t[ne];cudaGraphEdgeData*ed=new cudaGraphEdgeData[ne];C(cudaGraphGetEdges(g,fr,to,ed,&ne));
    int prog=0;for(size_t i=0;i<ne;i++)prog+=ed[i].type==cudaGraphDependencyTypeProgrammatic;
    C(cudaGraphInstantiate(&x,g,0));C(cudaGraphLaunch(x,s[0]));cudaStreamSynchronize(s[0]);cudaEventRecord(a,s[0]);
    for(int r=0;r<20;r++)C(cudaGraphLaunch(x,s[0]));cudaEventRecord(b,s[0]);cudaEventSynchronize(b);float f;cudaEventElapsedTime(&f,a,b);
    printf("F3 graph leaf records: %zu edges, %d programmatic, gpu %.2f us/call\n",ne,prog,f*1e3/(20*M));}
  // F4: next/leafrec's dance: after each pdl kernel a chained record node added to the stream's
  // dependencies too; before the next kernel the dependencies set back to the kernel alone.
  {const int M=200;cudaGraphNode_t prev=nullptr;C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));
    C(cudaStreamWaitEvent(cs,E4,cudaEventWaitExternal));
    for(int i=0;i<M;i++){
      if(prev){cudaStreamCaptureStatus st;const cudaGraphNode_t*d;const cudaGraphEdgeData*ed;size_t n;C(cudaStreamGetCaptureInfo(cs,&st,nullptr,nullptr,&d,&ed,&n));
        if(n==2){cudaGraphNode_t k=d[0]==prev?d[1]:d[0];C(cudaStreamUpdateCaptureDependencies(cs,&k,nullptr,1,cudaStreamSetCaptureDependencies));}}
      plk(cs,d,1);leafRecord(cs,E4,&prev);C(cudaStreamUpdateCaptureDependencies(cs,&prev,nullptr,1,cudaStreamAddCaptureDependencies));}
    C(cudaStreamEndCapture(cs,&g));size_t ne=0;C(cudaGraphGetEdges(g,nullptr,nullptr,nullptr,&ne));
    cudaGraphNode_t*fr=new cudaGraphNode_t[ne],*to=new cudaGraphNode_t[ne];cudaGraphEdgeData*ed=new cudaGraphEdgeData[ne];C(cudaGraphGetEdges(g,fr,to,ed,&ne));
    int prog=0;for(size_t i=0;i<ne;i++)prog+=ed[i].type==cudaGraphDependencyTypeProgrammatic;
    C(cudaGraphInstantiate(&x,g,0));C(cudaGraphLaunch(x,s[0]));cudaStreamSynchronize(s[0]);cudaEventRecord(a,s[0]);
    for(int r=0;r<20;r++)C(cudaGraphLaunch(x,s[0]));cudaEventRecord(b,s[0]);cudaEventSynchronize(b);float f;cudaEventElapsedTime(&f,a,b);
    printf("F4 graph records in the frontier, trimmed before each kernel: %zu edges, %d programmatic, gpu %.2f us/call (F3 0.67, in-stream 1.46)\n",ne,prog,f*1e3/(20*M));}
  // H3: A,B,A capture with leaf chained records (no in-stream record); eager wait after replay must start >= last call end.
  {cudaEvent_t S,O,F,J1,J2;for(auto e:{&S,&O,&F,&J1,&J2})C(cudaEventCreateWithFlags(e,cudaEventDisableTiming));
   cudaStream_t A=s[5],B=s[6];cudaGraphNode_t prev=nullptr;C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));C(cudaEventRecord(F,cs));
   C(cudaStreamWaitEvent(A,F,0));C(cudaStreamWaitEvent(B,F,0));
   C(cudaStreamWaitEvent(A,S,cudaEventWaitExternal));spin<<<1,1,0,A>>>(20000000);leafRecord(A,S,&prev);
   C(cudaEventRecord(O,A));C(cudaStreamWaitEvent(B,O,0));spin<<<1,1,0,B>>>(200000000);leafRecord(B,S,&prev);C(cudaEventRecord(O,B));
   C(cudaStreamWaitEvent(A,O,0));spin<<<1,1,0,A>>>(100000000);stampAt<<<1,1,0,A>>>(T+100);leafRecord(A,S,&prev);C(cudaEventRecord(O,A));
   C(cudaEventRecord(J1,A));C(cudaEventRecord(J2,B));C(cudaStreamWaitEvent(cs,J1,0));C(cudaStreamWaitEvent(cs,J2,0));
   C(cudaStreamEndCapture(cs,&g));C(cudaGraphInstantiate(&x,g,0));
   for(int v=0;v<2;v++){reset();st(s[0]);C(cudaGraphLaunch(x,s[1]));C(cudaStreamWaitEvent(s[2],S,0));stampAt<<<1,1,0,s[2]>>>(T+101);waitAll(5);
    printf("H3 leaf A,B,A: last call ends %.1f, eager after wait starts %.1f (must be >=)\n",ms(100,0),ms(101,0));}}
  // H4: nesting (the review's objection to leaf records). Outer capture: call A (20 ms) with a leaf
  // record of S; then a child graph node holding call B (200 ms, stamps its end at T+100) with its own
  // leaf record of S; end. After the replay an eager wait on S must start only once B has ended.
  // H4b: the same with a direct call C (50 ms, stamps T+102) after the child, its leaf record chained
  // to A's (not to the child's).
  for(int variant=0;variant<2;variant++){
   cudaEvent_t S;C(cudaEventCreateWithFlags(&S,cudaEventDisableTiming));cudaStream_t q=s[5];cudaGraph_t child,outer;
   cudaGraphNode_t prevChild=nullptr,prevOuter=nullptr;
   C(cudaStreamBeginCapture(q,cudaStreamCaptureModeGlobal));spin<<<1,1,0,q>>>(200000000);stampAt<<<1,1,0,q>>>(T+100);
   leafRecord(q,S,&prevChild);C(cudaStreamEndCapture(q,&child));
   C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));spin<<<1,1,0,cs>>>(20000000);leafRecord(cs,S,&prevOuter);
   {cudaStreamCaptureStatus st;cudaGraph_t g2;const cudaGraphNode_t*d;size_t n;C(cudaStreamGetCaptureInfo(cs,&st,nullptr,&g2,&d,nullptr,&n));
    cudaGraphNode_t cn;C(cudaGraphAddChildGraphNode(&cn,g2,d,n,child));C(cudaStreamUpdateCaptureDependencies(cs,&cn,nullptr,1,cudaStreamSetCaptureDependencies));}
   if(variant==1){spin<<<1,1,0,cs>>>(50000000);stampAt<<<1,1,0,cs>>>(T+102);leafRecord(cs,S,&prevOuter);}
   C(cudaStreamEndCapture(cs,&outer));cudaGraphExec_t xo;C(cudaGraphInstantiate(&xo,outer,0));
   for(int v=0;v<2;v++){reset();T[102]=0;st(s[0]);C(cudaGraphLaunch(xo,s[1]));C(cudaStreamWaitEvent(s[2],S,0));stampAt<<<1,1,0,s[2]>>>(T+101);waitAll(5);
    if(variant==0)printf("H4 leaf A, child(B + leaf): B ends %.1f, eager after wait starts %.1f (must be >=; ~20 = bound to A's record)\n",ms(100,0),ms(101,0));
    else printf("H4b leaf A, child(B + leaf), C + leaf chained to A's: B ends %.1f, C ends %.1f, eager starts %.1f (must be >= both)\n",ms(100,0),ms(102,0),ms(101,0));}}
  // H4c: as H4 but A's leaf record also waits for a 400 ms spin on a forked stream, so it runs after
  // the child's record (B ends ~220 ms): an eager wait bound to "the last record run" starts ~420,
  // one bound to the child's record ~220. Either is ordered after B; a start before B's end is not.
  {cudaEvent_t S;C(cudaEventCreateWithFlags(&S,cudaEventDisableTiming));cudaStream_t q=s[5];cudaGraph_t child,outer;
   cudaGraphNode_t prevChild=nullptr,prevOuter=nullptr;
   C(cudaStreamBeginCapture(q,cudaStreamCaptureModeGlobal));spin<<<1,1,0,q>>>(200000000);stampAt<<<1,1,0,q>>>(T+100);
   leafRecord(q,S,&prevChild);C(cudaStreamEndCapture(q,&child));
   cudaEvent_t fk,jn;C(cudaEventCreateWithFlags(&fk,cudaEventDisableTiming));C(cudaEventCreateWithFlags(&jn,cudaEventDisableTiming));
   C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));spin<<<1,1,0,cs>>>(20000000);
   C(cudaEventRecord(fk,cs));C(cudaStreamWaitEvent(s[6],fk,0));spin<<<1,1,0,s[6]>>>(400000000);C(cudaEventRecord(jn,s[6]));
   {cudaStreamCaptureStatus st;cudaGraph_t g2;const cudaGraphNode_t*d;size_t n;C(cudaStreamGetCaptureInfo(s[6],&st,nullptr,&g2,&d,nullptr,&n));
    cudaGraphNode_t longSpin=n?d[0]:nullptr;C(cudaStreamGetCaptureInfo(cs,&st,nullptr,&g2,&d,nullptr,&n));
    cudaGraphNode_t deps[4];size_t k=0;for(size_t i=0;i<n&&k<3;i++)deps[k++]=d[i];if(longSpin)deps[k++]=longSpin;
    cudaGraphNode_t ra=nullptr;C(cudaGraphAddEventRecordNode(&ra,g2,deps,k,S));
    C(cudaStreamGetCaptureInfo(cs,&st,nullptr,&g2,&d,nullptr,&n));
    cudaGraphNode_t cn;C(cudaGraphAddChildGraphNode(&cn,g2,d,n,child));C(cudaStreamUpdateCaptureDependencies(cs,&cn,nullptr,1,cudaStreamSetCaptureDependencies));}
   C(cudaStreamWaitEvent(cs,jn,0));C(cudaStreamEndCapture(cs,&outer));cudaGraphExec_t xo;C(cudaGraphInstantiate(&xo,outer,0));
   for(int v=0;v<2;v++){reset();st(s[0]);C(cudaGraphLaunch(xo,s[1]));C(cudaStreamWaitEvent(s[2],S,0));stampAt<<<1,1,0,s[2]>>>(T+101);waitAll(5);
    printf("H4c A's record after a 400 ms spin, child(B + leaf): B ends %.1f, eager after wait starts %.1f (>= B's end: ordered; ~420: bound to the last record run)\n",ms(100,0),ms(101,0));}}
  printf("end: %s\n",cudaGetErrorString(cudaDeviceSynchronize()));
}
