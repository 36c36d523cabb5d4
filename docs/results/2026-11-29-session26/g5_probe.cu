// Session 26: what the comm's cross-context record costs per call in a graph of K calls replayed R
// times (yali-perf -G 5 replays graphs of 5 calls). Patterns (W = external wait on S at the
// capture's first call; R = record of S):
//  chain     K1->K2->..->Kk                          (main: no order)
//  wchain    W->K1->..->Kk                           (only the first call's wait)
//  instream  W->K1->R->K2->R->..                     (next/all: in-stream record after every call)
//  leafrec   W->K1->K2.., Ki->Ri, R(i-1)->Ri, frontier dance (next/leafrec)
//  leaf3     as leafrec without the frontier add (probe F3)
//  moved     W->K1->..->Kk->R: one record node, its edge moved to each new kernel (no dependents yet)
//  tail      W->K1->..->Kk then one in-stream record (the lower bound: the capture knew its last call)
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#define C(x) do{cudaError_t e_=(x);if(e_)printf("L%d %s -> %s\n",__LINE__,#x,cudaGetErrorString(e_));cudaGetLastError();}while(0)
__global__ void pdl(int*x){asm volatile("griddepcontrol.wait;":::"memory");if(threadIdx.x==0)atomicAdd(x+blockIdx.x,1);asm volatile("griddepcontrol.launch_dependents;");}
int*d;cudaStream_t cs,s0;cudaEvent_t S;
void plk(cudaStream_t q){cudaLaunchConfig_t c={};c.gridDim=16;c.blockDim=256;c.stream=q;cudaLaunchAttribute a[1];
  a[0].id=cudaLaunchAttributeProgrammaticStreamSerialization;a[0].val.programmaticStreamSerializationAllowed=1;c.attrs=a;c.numAttrs=1;
  C(cudaLaunchKernelEx(&c,pdl,d));}
void info(cudaGraph_t*g,std::vector<cudaGraphNode_t>&v){cudaStreamCaptureStatus st;const cudaGraphNode_t*dd;const cudaGraphEdgeData*ed;size_t n;
  C(cudaStreamGetCaptureInfo(cs,&st,nullptr,g,&dd,&ed,&n));v.assign(dd,dd+n);}
void setDeps(cudaGraphNode_t*n,size_t k,bool add){C(cudaStreamUpdateCaptureDependencies(cs,n,nullptr,k,add?cudaStreamAddCaptureDependencies:cudaStreamSetCaptureDependencies));}
float run(int pat,int K,int R,int*prog){
  cudaGraph_t g;cudaGraphExec_t x;cudaGraphNode_t rec=nullptr,kern=nullptr;
  C(cudaStreamBeginCapture(cs,cudaStreamCaptureModeGlobal));
  for(int i=0;i<K;i++){
    if(pat>0&&i==0)C(cudaStreamWaitEvent(cs,S,cudaEventWaitExternal));
    if((pat==3)&&rec){std::vector<cudaGraphNode_t>v;info(nullptr,v);if(v.size()==2){cudaGraphNode_t k=v[0]==rec?v[1]:v[0];setDeps(&k,1,false);}}
    if(pat==5&&rec){setDeps(&kern,1,false);}  // frontier back to the kernel alone
    plk(cs);
    std::vector<cudaGraphNode_t>v;cudaGraph_t cg;info(&cg,v);
    if(pat==2)C(cudaEventRecordWithFlags(S,cs,cudaEventRecordExternal));
    if(pat==3||pat==4){std::vector<cudaGraphNode_t>a(v);if(rec)a.push_back(rec);cudaGraphNode_t n;C(cudaGraphAddEventRecordNode(&n,cg,a.data(),a.size(),S));rec=n;
      if(pat==3)setDeps(&rec,1,true);}
    if(pat==5){kern=v[0];size_t nd=0;
      if(rec){C(cudaGraphNodeGetDependentNodes(rec,nullptr,nullptr,&nd));}
      if(rec&&nd==0){cudaGraphNode_t from;size_t nf=1;C(cudaGraphNodeGetDependencies(rec,&from,nullptr,&nf));C(cudaGraphRemoveDependencies(cg,&from,&rec,nullptr,1));C(cudaGraphAddDependencies(cg,&kern,&rec,nullptr,1));}
      else {cudaGraphNode_t n;C(cudaGraphAddEventRecordNode(&n,cg,&kern,1,S));rec=n;}
      setDeps(&rec,1,true);}
  }
  if(pat==6)C(cudaEventRecordWithFlags(S,cs,cudaEventRecordExternal));
  C(cudaStreamEndCapture(cs,&g));size_t ne=0;C(cudaGraphGetEdges(g,nullptr,nullptr,nullptr,&ne));
  std::vector<cudaGraphNode_t>fr(ne),to(ne);std::vector<cudaGraphEdgeData>ed(ne);C(cudaGraphGetEdges(g,fr.data(),to.data(),ed.data(),&ne));
  *prog=0;for(size_t i=0;i<ne;i++)*prog+=ed[i].type==cudaGraphDependencyTypeProgrammatic;
  C(cudaGraphInstantiate(&x,g,0));cudaEvent_t a,b;cudaEventCreate(&a);cudaEventCreate(&b);
  for(int r=0;r<20;r++)C(cudaGraphLaunch(x,s0));cudaStreamSynchronize(s0);cudaEventRecord(a,s0);
  for(int r=0;r<R;r++)C(cudaGraphLaunch(x,s0));cudaEventRecord(b,s0);cudaEventSynchronize(b);float f;cudaEventElapsedTime(&f,a,b);
  cudaGraphExecDestroy(x);cudaGraphDestroy(g);return f*1e3f/(R*K);}
int main(){const char*nm[]={"chain","wchain","instream","leafrec","leaf3","moved","tail"};
  C(cudaMalloc(&d,4096));C(cudaStreamCreateWithFlags(&cs,cudaStreamNonBlocking));C(cudaStreamCreateWithFlags(&s0,cudaStreamNonBlocking));
  C(cudaEventCreateWithFlags(&S,cudaEventDisableTiming));
  for(int K:{1,5,20})for(int rep=0;rep<2;rep++){printf("K=%-2d",K);for(int p=0;p<7;p++){int prog;float u=run(p,K,K==20?200:1000,&prog);printf(" %s=%.2f(%d)",nm[p],u,prog);}printf("\n");}
  C(cudaDeviceSynchronize());printf("end\n");}
